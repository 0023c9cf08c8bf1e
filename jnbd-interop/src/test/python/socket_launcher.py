#!/usr/bin/env python3
"""Does for a test what systemd does for a socket unit and its service: binds a listening socket once and
keeps it, and runs the service with it as descriptor 3 (LISTEN_FDS=1, LISTEN_PID=the service's pid) each time
it is started, so that between a stop and the next start clients wait in the socket's accept queue.

Usage: socket_launcher.py PORT_FILE COMMAND [ARG...]
Binds 127.0.0.1 on a free port and writes the port to PORT_FILE. Then reads commands, one a line, on stdin:
  start   run COMMAND with the socket; answers "started PID"
  stop    SIGTERM to it, and wait; answers "exited STATUS"
  quit    stop it if it runs, close the socket, exit
"""
import fcntl
import os
import signal
import socket
import subprocess
import sys


def main():
    port_file, command = sys.argv[1], sys.argv[2:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    # Above 3 (where the socket itself likely landed), so that moving it onto 3 in the child is a real move.
    fd = fcntl.fcntl(listener.fileno(), fcntl.F_DUPFD_CLOEXEC, 10)
    child = None

    def stop():
        child.send_signal(signal.SIGTERM)
        return child.wait()

    for line in sys.stdin:
        word = line.strip()
        if word == "start":
            # bash (dash takes no descriptor above 9) puts the socket on 3 and names itself in LISTEN_PID,
            # then execs the command, which keeps that pid (bin/jnbd execs the JVM in turn).
            child = subprocess.Popen(
                ["bash", "-c", 'exec 3<&%d %d<&-; LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=nbd exec "$@"' % (fd, fd), "bash"]
                + command, pass_fds=(fd,), stdout=sys.stderr)  # stdout answers the commands
            print("started", child.pid, flush=True)
        elif word == "stop":
            print("exited", stop(), flush=True)
            child = None
        elif word == "quit":
            break
    if child is not None:
        stop()
    listener.close()


if __name__ == "__main__":
    main()
