"""bench/lib's StatusReader (the status poll of bench/pool) against a real `jnbd memserver`: the document over one
connection kept open, read again and again; an export the server does not have gives
None, not an exception. Needs the build bin/test has just made. Alone: python3 -m unittest discover -s bench/tests
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import benchlib as B  # noqa: E402


class StatusReaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = B.jnbd_memserver("64M", name="status-test")
        if not cls.server.start(timeout=120):
            raise RuntimeError(f"jnbd memserver did not start: {cls.server.error}")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_reads_the_document_again_over_one_connection(self):
        reader = B.StatusReader(self.server.port, "status")
        try:
            first = reader.read()
            self.assertIsNotNone(first)
            self.assertEqual(first["server"], "jnbd memory server")
            self.assertEqual(first["ram_bytes"], 64 << 20)
            sock = reader.sock
            uptimes = [first["uptime_seconds"]]
            for _ in range(5):
                again = reader.read()
                self.assertEqual(again["incarnation"], first["incarnation"])
                uptimes.append(again["uptime_seconds"])
            self.assertIs(reader.sock, sock, "each read must reuse the connection")
            self.assertEqual(uptimes, sorted(uptimes))
        finally:
            reader.close()

    def test_an_export_the_server_lacks_gives_none(self):
        reader = B.StatusReader(self.server.port, "no-such-export")
        self.assertIsNone(reader.read())
        self.assertIsNone(reader.sock)

    def test_a_closed_port_gives_none(self):
        self.assertIsNone(B.StatusReader(B.free_port(), "status", timeout=2).read())


if __name__ == "__main__":
    unittest.main()
