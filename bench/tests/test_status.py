"""bench/lib's StatusReader (the status poll of bench/pool), against a small NBD server in this process that speaks
the part of the protocol a jnbd status export does (fixed newstyle, NBD_OPT_GO, simple replies) and renders its
document afresh on every read, as DocumentBackend does: one connection kept open and read again and again, an export
the server refuses and a port nobody listens on give None, not an exception. Standard library only, no jnbd build
(bin/test runs these first). Alone: python3 -m unittest discover -s bench/tests
"""

import json
import os
import socket
import struct
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import benchlib as B  # noqa: E402

SIZE = 4096


class FakeStatusServer:
    """Serves the export `status`: {"reads": N} padded with spaces to SIZE bytes, N counting every read."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.reads = 0
        self.connections = 0
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    @staticmethod
    def recv(conn, n):
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise OSError("closed")
            buf += chunk
        return buf

    def serve(self, conn):
        try:
            with conn:
                conn.sendall(b"NBDMAGIC" + struct.pack(">QH", 0x49484156454F5054, 3))
                struct.unpack(">I", self.recv(conn, 4))
                _, option, length = struct.unpack(">QII", self.recv(conn, 16))
                data = self.recv(conn, length)
                name = data[4:4 + struct.unpack(">I", data[:4])[0]].decode()
                if option != 7 or name != "status":
                    msg = b"no such export"
                    conn.sendall(struct.pack(">QIII", 0x3E889045565A9, option, 0x80000006, len(msg)) + msg)
                    return
                info = struct.pack(">HQH", 0, SIZE, 1)
                conn.sendall(struct.pack(">QIII", 0x3E889045565A9, option, 3, len(info)) + info
                             + struct.pack(">QIII", 0x3E889045565A9, option, 1, 0))
                while True:
                    magic, _, kind, cookie, offset, length = struct.unpack(">IHHQQI", self.recv(conn, 28))
                    assert magic == 0x25609513 and kind == 0 and offset == 0 and length == SIZE
                    self.reads += 1
                    doc = json.dumps({"reads": self.reads}).encode().ljust(SIZE)
                    conn.sendall(struct.pack(">IIQ", 0x67446698, 0, cookie) + doc)
        except OSError:
            pass

    def close(self):
        self.listener.close()


class StatusReaderTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeStatusServer()

    def tearDown(self):
        self.server.close()

    def test_reads_the_document_afresh_over_one_connection(self):
        reader = B.StatusReader(self.server.port, "status")
        try:
            self.assertEqual([reader.read() for _ in range(5)], [{"reads": n} for n in range(1, 6)])
            self.assertEqual(self.server.connections, 1)
        finally:
            reader.close()

    def test_an_export_the_server_refuses_gives_none(self):
        reader = B.StatusReader(self.server.port, "swap/status")
        self.assertIsNone(reader.read())
        self.assertIsNone(reader.sock)

    def test_a_port_nobody_listens_on_gives_none(self):
        self.assertIsNone(B.StatusReader(B.free_port(), "status", timeout=2).read())


if __name__ == "__main__":
    unittest.main()
