package io.jnbd.server.backend;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.io.Errno;
import java.io.IOException;
import java.nio.channels.ClosedByInterruptException;
import java.nio.file.AccessDeniedException;
import org.junit.jupiter.api.Test;

/** Every failure reaches the client as the NBD error of its cause (NBD spec, "Error values"). */
class NbdErrorsTest {

    @Test
    void errnoValuesMapAsTheSpecAsks() {
        assertThat(NbdErrors.ofErrno(Errno.ENOSPC)).isEqualTo(Nbd.ENOSPC);
        assertThat(NbdErrors.ofErrno(Errno.EDQUOT)).as("a quota is a full disk to the client").isEqualTo(Nbd.ENOSPC);
        assertThat(NbdErrors.ofErrno(Errno.EFBIG)).isEqualTo(Nbd.ENOSPC);
        assertThat(NbdErrors.ofErrno(Errno.EROFS)).isEqualTo(Nbd.EPERM);
        assertThat(NbdErrors.ofErrno(Errno.EPERM)).isEqualTo(Nbd.EPERM);
        assertThat(NbdErrors.ofErrno(Errno.EACCES)).isEqualTo(Nbd.EPERM);
        assertThat(NbdErrors.ofErrno(Errno.EINVAL)).isEqualTo(Nbd.EINVAL);
        assertThat(NbdErrors.ofErrno(Errno.EOVERFLOW)).isEqualTo(Nbd.EOVERFLOW);
        assertThat(NbdErrors.ofErrno(Errno.EOPNOTSUPP)).isEqualTo(Nbd.ENOTSUP);
        assertThat(NbdErrors.ofErrno(Errno.ENOMEM)).isEqualTo(Nbd.ENOMEM);
        assertThat(NbdErrors.ofErrno(Errno.EIO)).isEqualTo(Nbd.EIO);
        assertThat(NbdErrors.ofErrno(71)).as("anything else").isEqualTo(Nbd.EIO);
    }

    @Test
    void exceptionsMapByWhatTheyCarry() {
        assertThat(NbdErrors.of(new NbdErrorException(Nbd.ENOTSUP, "no fast zero"))).isEqualTo(Nbd.ENOTSUP);
        assertThat(NbdErrors.of(new InterruptedException())).isEqualTo(Nbd.ESHUTDOWN);
        assertThat(NbdErrors.of(new ClosedByInterruptException())).isEqualTo(Nbd.ESHUTDOWN);
        assertThat(NbdErrors.of(new OutOfMemoryError())).isEqualTo(Nbd.ENOMEM);
        assertThat(NbdErrors.of(new AccessDeniedException("/dev/sdb"))).isEqualTo(Nbd.EPERM);
        assertThat(NbdErrors.of(new IOException())).isEqualTo(Nbd.EIO);
    }

    @Test
    void theJdksOwnFileCallsAreKnownByTheirMessage() {
        // FileChannel throws IOException with the C library's text for the errno and nothing else.
        assertThat(NbdErrors.of(new IOException("No space left on device"))).isEqualTo(Nbd.ENOSPC);
        assertThat(NbdErrors.of(new IOException("Disk quota exceeded"))).isEqualTo(Nbd.ENOSPC);
        assertThat(NbdErrors.of(new IOException("Read-only file system"))).isEqualTo(Nbd.EPERM);
        assertThat(NbdErrors.of(new IOException("Input/output error"))).isEqualTo(Nbd.EIO);
    }
}
