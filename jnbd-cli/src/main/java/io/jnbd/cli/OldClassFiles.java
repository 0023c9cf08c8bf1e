package io.jnbd.cli;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.classfile.ClassFile;
import java.lang.classfile.ClassFileVersion;
import java.lang.classfile.ClassHierarchyResolver;
import java.lang.classfile.ClassTransform;
import java.lang.classfile.CodeTransform;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.jar.JarOutputStream;

/**
 * Copies the jars of a class path whose class files predate Java 6 (picocli's are Java 5) as Java 6 class
 * files with stack maps, for bin/jnbd's AOT cache: the JVM leaves class files older than version 50 out of
 * the cache, and picocli's 200 classes, loaded from their jar and checked by the old type-inferring
 * verifier, were half of what `jnbd info` spent before it connected. The code is the same instructions; only
 * the version and the stack maps that version needs are new, and the JVM verifies them as it would any class.
 * A jar with a class that cannot be rewritten is left as it is.
 *
 * <p>Usage: {@code OldClassFiles DIR CLASSPATH}; prints CLASSPATH with each rewritten jar replaced by its copy in DIR.
 */
final class OldClassFiles {

    /** Java 6: the first version the cache takes, and the last that still allows every older instruction. */
    private static final int TARGET_MAJOR = ClassFile.JAVA_6_VERSION;

    private OldClassFiles() {
    }

    public static void main(String[] args) throws IOException {
        if (args.length != 2) {
            System.err.println("usage: OldClassFiles DIR CLASSPATH");
            System.exit(2);
        }
        Path dir = Path.of(args[0]);
        Files.createDirectories(dir);
        List<String> out = new ArrayList<>();
        for (String entry : args[1].split(java.io.File.pathSeparator)) {
            Path jar = Path.of(entry);
            Path copy = dir.resolve(jar.getFileName());
            out.add(entry.endsWith(".jar") && Files.isRegularFile(jar) && rewrite(jar, copy) ? copy.toString() : entry);
        }
        System.out.println(String.join(java.io.File.pathSeparator, out));
    }

    /** Writes {@code copy} and returns true if {@code jar} has old class files and all of them could be rewritten. */
    static boolean rewrite(Path jar, Path copy) throws IOException {
        try (JarFile in = new JarFile(jar.toFile())) {
            if (!hasOldClasses(in)) return false;
            ClassFile cf = ClassFile.of(ClassFile.StackMapsOption.GENERATE_STACK_MAPS,
                ClassFile.ClassHierarchyResolverOption.of(ClassHierarchyResolver.defaultResolver()
                    .orElse(ClassHierarchyResolver.ofClassLoading(new URLClassLoader(new URL[]{jar.toUri().toURL()}, null)))));
            Path tmp = Files.createTempFile(copy.getParent(), copy.getFileName().toString(), ".tmp");
            try (OutputStream os = Files.newOutputStream(tmp); JarOutputStream jos = new JarOutputStream(os)) {
                for (Enumeration<JarEntry> e = in.entries(); e.hasMoreElements(); ) {
                    JarEntry entry = e.nextElement();
                    byte[] bytes;
                    try (InputStream is = in.getInputStream(entry)) {
                        bytes = is.readAllBytes();
                    }
                    if (entry.getName().endsWith(".class") && major(bytes) < TARGET_MAJOR) bytes = upgrade(cf, bytes);
                    jos.putNextEntry(new JarEntry(entry.getName()));
                    jos.write(bytes);
                    jos.closeEntry();
                }
            } catch (RuntimeException e) {
                // A class the ClassFile API cannot give stack maps (jsr/ret, a broken class): keep the jar as it is.
                Files.deleteIfExists(tmp);
                return false;
            }
            Files.move(tmp, copy, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
            return true;
        }
    }

    private static boolean hasOldClasses(JarFile jar) throws IOException {
        for (Enumeration<JarEntry> e = jar.entries(); e.hasMoreElements(); ) {
            JarEntry entry = e.nextElement();
            String name = entry.getName();
            if (!name.endsWith(".class") || name.startsWith("META-INF/") || name.endsWith("module-info.class")) continue;
            try (InputStream is = jar.getInputStream(entry)) {
                return major(is.readNBytes(8)) < TARGET_MAJOR;
            }
        }
        return false;
    }

    private static int major(byte[] classFile) {
        return classFile.length < 8 ? Integer.MAX_VALUE : ((classFile[6] & 0xff) << 8) | (classFile[7] & 0xff);
    }

    private static byte[] upgrade(ClassFile cf, byte[] bytes) {
        // Rebuilding every method body is what makes the API compute stack maps for it.
        return cf.transformClass(cf.parse(bytes), ClassTransform.transformingMethodBodies(CodeTransform.ACCEPT_ALL)
            .andThen((builder, element) -> {
                if (element instanceof ClassFileVersion) builder.withVersion(TARGET_MAJOR, 0);
                else builder.with(element);
            }));
    }
}
