"""Bad options are refused before anything is sent: each call below goes to
a socket nobody listens on, so reaching the service would raise
SandboxError ("unavailable") instead of the TypeError or ValueError
asserted. The positive controls show well-formed values get that far."""

import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from aleph_sandbox import Client, Process, SandboxError  # noqa: E402


class OptionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="aleph-py-none-")
        cls.addr = "unix:" + os.path.join(cls.dir, "aleph.sock")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def refused(self, exc, fn, *words):
        with self.assertRaises(exc) as cm:
            fn()
        for w in words:
            self.assertIn(w, str(cm.exception))

    def unavailable(self, fn):
        with self.assertRaises(SandboxError) as cm:
            fn()
        self.assertEqual(cm.exception.code, "unavailable")

    def test_zero_memory_and_output_refused_not_dropped(self):
        # On the wire 0 means "not given": sent, it would run with the
        # default, which "no memory" or "no output" never means.
        c = Client(self.addr)
        self.refused(ValueError, lambda: c.exec(["/bin/true"], memory_mb=0), "memory_mb", "positive", "no memory limit")
        self.refused(ValueError, lambda: c.exec(["/bin/true"], max_output=0), "max_output", "positive", "budget")
        self.refused(ValueError, lambda: list(c.stream(["/bin/true"], max_output=0)), "max_output")
        self.refused(ValueError, lambda: c.start(["/bin/true"], memory_mb=0), "memory_mb")
        # Positive control: the smallest meaningful values are sent.
        self.unavailable(lambda: c.exec(["/bin/true"], timeout=0.001, memory_mb=1, max_output=1))
        self.unavailable(lambda: c.start(["/bin/true"], timeout=1, memory_mb=64, max_output=1 << 20))

    def test_host_list_travels_as_a_list(self):
        # A list of hosts is sent one host an entry (net_hosts), not joined
        # into the CLI's syntax for the service to split again; a string
        # is that syntax, sent as net.
        c = Client(self.addr)
        r = c._request(["/bin/true"], net=["a.example", " b.example:8443 "])
        self.assertEqual((r.get("netHosts"), "net" in r), (["a.example", "b.example:8443"], False))
        self.assertEqual(c._request(["/bin/true"], net="a.example,b.example")["net"], "a.example,b.example")
        for net, want in (([], "none"), (["all"], "all"), (["none"], "none"), ("all", "all")):
            r = c._request(["/bin/true"], net=net)
            self.assertEqual((r["net"], "netHosts" in r), (want, False), net)
        self.refused(TypeError, lambda: c._request(["/bin/true"], net=[1]), "net")

    def test_zero_timeout_is_the_default(self):
        # timeout=0 is "not given", as on the wire and in the TypeScript
        # client: the request carries no timeout (the service's default).
        c = Client(self.addr)
        self.assertNotIn("timeoutSeconds", c._request(["/bin/true"], timeout=0))
        self.assertNotIn("timeoutSeconds", c._request(["/bin/true"], timeout=0.0))
        self.assertEqual(c._request(["/bin/true"], timeout=5)["timeoutSeconds"], 5.0)
        self.unavailable(lambda: c.exec(["/bin/true"], timeout=0))
        self.unavailable(lambda: c.start(["/bin/true"], timeout=0))
        # False is not 0: a bool is refused as a number.
        self.refused(TypeError, lambda: c.exec(["/bin/true"], timeout=False), "timeout")

    def test_bad_numbers(self):
        c = Client(self.addr)
        for bad in (-1, float("nan"), float("inf"), 365 * 24 * 3600 + 1):
            self.refused(ValueError, lambda: c.exec(["/bin/true"], timeout=bad), "timeout", repr(bad))
        for bad in ("30", True, [1]):
            self.refused(TypeError, lambda: c.exec(["/bin/true"], timeout=bad), "timeout")
        self.refused(ValueError, lambda: c.exec(["/bin/true"], memory_mb=-5), "memory_mb", "-5")
        self.refused(ValueError, lambda: c.exec(["/bin/true"], memory_mb=2 ** 64), "memory_mb")
        self.refused(ValueError, lambda: c.exec(["/bin/true"], max_output=2 ** 63), "max_output")
        # Not truncated to 1: a fraction of a byte is a mistake.
        self.refused(TypeError, lambda: c.exec(["/bin/true"], max_output=1.5), "max_output", "whole number")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], memory_mb="512"), "memory_mb")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], memory_mb=True), "memory_mb")

    def test_booleans_and_paths(self):
        c = Client(self.addr)
        # bool("no") is True: a string is refused, not read as a flag.
        self.refused(TypeError, lambda: c.exec(["/bin/true"], spawn="no"), "spawn", "True or False")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], check=1), "check")
        self.refused(TypeError, lambda: c.start(["/bin/true"], tty="yes"), "tty")
        # A lone string would be a list of its characters: "/", "/e", ...
        self.refused(TypeError, lambda: c.exec(["/bin/true"], read="/etc"), "read", "['/etc']")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], write=None), "write")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], read=[1]), "read")
        self.unavailable(lambda: c.exec(["/bin/true"], spawn=False, read=("/etc",), write=[]))

    def test_strings_only(self):
        # A number in env or argv would reach the service as JSON it
        # refuses with a protocol error, or not as the string meant.
        c = Client(self.addr)
        self.refused(TypeError, lambda: c.exec(["/bin/true"], env={"N": 1}), "env['N']", "int", "str()")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], env={"N": None}), "env['N']")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], env={1: "x"}), "env", "name")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], env={"": "x"}), "env", "name")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], env=["A=1"]), "env", "mapping")
        self.refused(TypeError, lambda: c.exec(["/bin/true"], secrets={"TOKEN": b"x"}), "secrets['TOKEN']", "bytes")
        self.refused(TypeError, lambda: c.start(["/bin/true"], env={"N": 2.5}), "env['N']")
        self.refused(TypeError, lambda: c.exec(["/bin/echo", 1]), "argv", "list of strings")
        self.refused(TypeError, lambda: list(c.stream(["/bin/echo", b"x"])), "argv")
        # Positive controls: strings (and empty mappings) get as far as the socket.
        self.unavailable(lambda: c.exec(["/bin/true"], env={"N": "1", "EMPTY": ""}, secrets={"T": "x"}))
        self.unavailable(lambda: c.exec(["/bin/true"], env={}, secrets={}))
        self.unavailable(lambda: c.exec(("/bin/echo", "tuple")))

    def test_terminal_size(self):
        c = Client(self.addr)
        self.refused(ValueError, lambda: c.start(["/bin/cat"], tty=True, rows=0), "rows and cols")
        self.refused(ValueError, lambda: c.start(["/bin/cat"], tty=True, cols=65536), "rows and cols")
        self.refused(TypeError, lambda: c.start(["/bin/cat"], tty=True, rows=2.5), "rows")
        # A size without a terminal would be ignored: refused instead.
        self.refused(TypeError, lambda: c.start(["/bin/cat"], rows=30, cols=100), "tty=True")
        p = Process(c, "proc-none")
        self.refused(ValueError, lambda: p.resize(0, 80), "rows and cols")
        self.unavailable(lambda: c.start(["/bin/cat"], tty=True, rows=1, cols=65535))
        self.unavailable(lambda: p.resize(24, 80))

    def test_client_and_process_timeouts(self):
        # 0 is the default (30), never a non-blocking socket; None is no bound.
        self.assertEqual(Client(self.addr, timeout=0).timeout, 30.0)
        self.assertEqual(Client(self.addr).timeout, 30.0)
        self.refused(ValueError, lambda: Client(self.addr, timeout=-1), "timeout")
        self.assertIsNone(Client(self.addr, timeout=None).timeout)
        p = Process(Client(self.addr), "proc-none")
        self.unavailable(lambda: p.wait(timeout=0))  # 0: the default, no bound
        self.refused(ValueError, lambda: p.read(timeout=-1), "timeout")
        self.refused(ValueError, lambda: p.read(timeout=float("nan")), "timeout")
        self.refused(TypeError, lambda: p.read(timeout="1"), "timeout")
        self.unavailable(lambda: p.read(timeout=0))
        self.unavailable(lambda: p.wait(timeout=5))

    def test_signal_names(self):
        p = Process(Client(self.addr), "proc-none")
        self.refused(ValueError, lambda: p.signal("STOP"), "TERM", "'STOP'")
        self.refused(TypeError, lambda: p.signal(15), "string")
        # "SIGTERM" and "term" are TERM.
        self.unavailable(lambda: p.signal("SIGTERM"))
        self.unavailable(lambda: p.signal("term"))


if __name__ == "__main__":
    unittest.main()
