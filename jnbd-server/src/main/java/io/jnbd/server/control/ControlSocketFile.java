package io.jnbd.server.control;

import java.io.IOException;
import java.net.ConnectException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Objects;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The control socket's file: bound where nobody else can reach it and moved into place whole, so that it is never
 * connectable by another user, not even for the instant between bind and chmod.
 *
 * <p>bind(2) makes the file with the process's umask, so a socket bound straight at the path would be open to
 * whatever the umask allows until a chmod. Instead it is bound inside a directory made for it with mode 0700 (mkdir
 * fails on a name that exists, so the directory is ours), set to 0600 there, and renamed to the path: rename is
 * atomic, and from the first instant the path names the socket it has mode 0600. A stale file at the path (a
 * server that died without removing it: connecting is refused) is replaced by that rename; a socket something
 * listens on, or a path that is not a socket, is left alone and the start fails.
 *
 * <p>Who may write the directory decides who may later rename the socket away or put another in its place (not who
 * may connect: that is the socket's mode, and SO_PEERCRED behind it). A directory every user may write without the
 * sticky bit would let anyone swap in a socket of theirs for the operator's client to talk to, so it is refused;
 * a group-writable one gets a warning.
 */
final class ControlSocketFile {
    private static final Logger log = LoggerFactory.getLogger(ControlSocketFile.class);
    private static final int S_IFMT = 0170000, S_IFSOCK = 0140000, S_ISVTX = 01000, S_IWGRP = 020, S_IWOTH = 02;

    private final Path path;
    private final ServerSocketChannel channel;
    /** The file's identity (device and inode) when it was put in place: only that file is removed at the end. */
    private final Object fileKey;

    private ControlSocketFile(Path path, ServerSocketChannel channel, Object fileKey) {
        this.path = path;
        this.channel = channel;
        this.fileKey = fileKey;
    }

    Path path() {
        return path;
    }

    ServerSocketChannel channel() {
        return channel;
    }

    /** Listens at {@code path}, mode 0600; the message of a failure is one line for the operator. */
    static ControlSocketFile bind(Path path) throws IOException {
        Path target = path.toAbsolutePath().normalize();
        Path dir = target.getParent();
        if (dir == null || !Files.isDirectory(dir)) throw new IOException("no directory " + dir + " to make the control socket " + target + " in");
        checkDirectory(dir);
        replaceableOrAbsent(target);
        Path privateDir = Files.createTempDirectory(dir, ".jnbd-ctl", PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
        Path bound = privateDir.resolve("s");
        ServerSocketChannel channel = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        try {
            try {
                channel.bind(UnixDomainSocketAddress.of(bound));
            } catch (IOException e) {
                throw new IOException("cannot listen on control socket " + target + " (bound first as " + bound + "): " + e.getMessage(), e);
            }
            Files.setPosixFilePermissions(bound, PosixFilePermissions.fromString("rw-------"));
            Files.move(bound, target, StandardCopyOption.ATOMIC_MOVE);
            Files.delete(privateDir);
            Object key = Files.readAttributes(target, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS).fileKey();
            return new ControlSocketFile(target, channel, key);
        } catch (IOException | RuntimeException e) {
            channel.close();
            Files.deleteIfExists(bound);
            Files.deleteIfExists(privateDir);
            throw e;
        }
    }

    private static void checkDirectory(Path dir) throws IOException {
        int mode = (Integer) Files.getAttribute(dir, "unix:mode");
        if ((mode & S_ISVTX) != 0) return; // like /tmp: only a file's owner (or root) may rename or remove it
        if ((mode & S_IWOTH) != 0) {
            throw new IOException("directory " + dir + " is writable by every user and not sticky: anyone could replace the "
                + "control socket there; choose one only root or this user may write (such as /run/jnbd)");
        }
        if ((mode & S_IWGRP) != 0) {
            log.warn("control socket directory {} is writable by its group: a member could replace the socket with one of "
                + "their own; a directory only root or this user may write is safer", dir);
        }
    }

    /** Returns if nothing is at {@code target} or a stale socket is, which the rename will replace; else fails. */
    private static void replaceableOrAbsent(Path target) throws IOException {
        int mode;
        try {
            mode = (Integer) Files.getAttribute(target, "unix:mode", LinkOption.NOFOLLOW_LINKS);
        } catch (NoSuchFileException e) {
            return;
        }
        if ((mode & S_IFMT) != S_IFSOCK) throw new IOException(target + " exists and is not a socket: not replacing it");
        try (SocketChannel probe = SocketChannel.open(UnixDomainSocketAddress.of(target))) {
            // connected: a server is there
        } catch (ConnectException e) {
            log.info("control socket {} is stale (nothing listens on it): replacing it", target);
            return;
        } catch (IOException e) {
            throw new IOException("control socket " + target + " exists and cannot be tried (" + e.getMessage() + "): not replacing it", e);
        }
        throw new IOException("another server is listening on control socket " + target);
    }

    /** Removes the file, if it is still the one this put there (not one a later server put in its place). */
    void remove() {
        try {
            Object now = Files.readAttributes(path, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS).fileKey();
            if (Objects.equals(now, fileKey)) Files.delete(path);
        } catch (NoSuchFileException e) {
            // already gone
        } catch (IOException e) {
            log.warn("could not remove control socket {}: {}", path, e.toString());
        }
    }
}
