"""Processes that outlive the call starting them (Client.start), against a
real `aleph-sandbox serve`."""

import os
import shutil
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from aleph_sandbox import Client, SandboxError  # noqa: E402
from test_client import BIN, Server  # noqa: E402

PROBE = ("import sys, urllib.request\n"
         "try:\n"
         "    print(urllib.request.urlopen('http://127.0.0.1:%d/', timeout=5).status)\n"
         "except OSError as e:\n"
         "    print('unreachable', e)\n")


def setUpModule():
    if shutil.which("bwrap") is None:
        raise unittest.SkipTest("bubblewrap (bwrap) is not installed: the client is tested against the real sandbox")
    if not os.access(os.path.join(BIN, "aleph-sandbox"), os.X_OK):
        raise RuntimeError("bin/aleph-sandbox is missing: run make build first")


def read_until(p, want, limit=20.0):
    out = b""
    deadline = time.time() + limit
    while want not in out:
        if p.exited or time.time() > deadline:
            raise AssertionError("never saw %r in %r (exited %s, result %s)" % (want, out, p.exited, p.result))
        out += p.read(timeout=1.0)
    return out


class ProcessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.addr = "unix:" + cls.server.sock

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def wait(self, p, timeout=20):
        try:
            return p.wait(timeout=timeout)
        except SandboxError as e:
            # What the service logged says where the process stuck.
            raise AssertionError("%s; serve log:\n%s" % (e, self.server.stderr()[-4000:])) from e

    def test_start_asks_the_clients_approver(self):
        """start() as the first call of a session: the approval request
        goes to the approver the client was given (it was denied, going
        only to the separate Approvals stream)."""
        seen = []

        def approver(req):
            seen.append(req)
            return req.session == "pstart-yes"

        c = Client(self.addr, approver=approver)
        argv = ["/bin/sh", "-c", "/bin/echo spawned"]
        r = self.wait(c.start(argv, session="pstart-yes", spawn=True))
        self.assertEqual((r.denied, r.exit_code, r.stdout), (False, 0, b"spawned\n"), r)
        r = self.wait(c.start(argv, session="pstart-no", spawn=True))
        self.assertEqual((r.denied, r.reason_code), (True, "approval_denied"), r)
        self.assertEqual([q.session for q in seen], ["pstart-yes", "pstart-no"])
        self.assertTrue(seen[0].requested.get("spawn"))
        # Control: a client without an approver is still denied.
        r = self.wait(Client(self.addr).start(argv, session="pstart-none", spawn=True))
        self.assertEqual((r.denied, r.reason_code), (True, "approval_denied"), r)
        # A start that asks nothing, with an approver: runs, asks nobody.
        r = self.wait(c.start(["/bin/echo", "plain"], session="pstart-plain"))
        self.assertEqual((r.stdout, len(seen)), (b"plain\n", 2))

    def test_cat_round_trip(self):
        c = Client(self.addr)
        p = c.start(["/bin/cat"], session="pp1")
        self.assertEqual(p.write(b"hello\n"), 6)
        self.assertEqual(read_until(p, b"hello\n"), b"hello\n")
        listed = c.processes("pp1")
        self.assertEqual([x["id"] for x in listed], [p.id])
        # One type on the wire's far side: a number, as the TypeScript
        # client gives (protobuf JSON sends an int64 as a string).
        self.assertIsInstance(listed[0]["startedUnixMs"], int)
        self.assertLess(abs(listed[0]["startedUnixMs"] - time.time() * 1000), 600000)
        self.assertIsInstance(listed[0]["exitCode"], int)
        self.assertIs(listed[0]["exited"], False)
        p.write("again\n")
        self.assertEqual(read_until(p, b"again\n"), b"again\n")
        p.close_stdin()
        r = p.wait()
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(r.stdout, b"hello\nagain\n")
        # Gone once waited for: a typed error.
        with self.assertRaises(SandboxError) as cm:
            p.read(timeout=0)
        self.assertEqual((cm.exception.code, cm.exception.reason_code), ("not_found", "process_unknown"))

    def test_signal(self):
        code = ("import signal, sys, time\n"
                "signal.signal(signal.SIGINT, lambda *a: (print('got-int'), sys.exit(7)))\n"
                "print('ready')\n"
                "time.sleep(60)\n")
        p = Client(self.addr).start(["/usr/bin/python3", "-u", "-c", code], session="pp2")
        read_until(p, b"ready\n")
        p.signal("INT")
        r = self.wait(p)
        self.assertEqual(r.exit_code, 7, r)
        self.assertIn(b"got-int", r.stdout)

    def test_tty_and_resize(self):
        code = ("import os, sys\n"
                "s = os.get_terminal_size(0)\n"
                "print('tty', os.isatty(0), s.lines, s.columns)\n"
                "sys.stdin.readline()\n"
                "s = os.get_terminal_size(0)\n"
                "print('now', s.lines, s.columns)\n")
        p = Client(self.addr).start(["/usr/bin/python3", "-u", "-c", code], session="pp3", tty=True, rows=30, cols=90)
        read_until(p, b"tty True 30 90")
        p.resize(40, 120)
        p.write(b"go\n")
        read_until(p, b"now 40 120")
        self.assertEqual(self.wait(p).exit_code, 0)

    def test_background_server_answers_later_exec_of_its_session(self):
        c = Client(self.addr)
        port = 18765
        srv = c.start(["/usr/bin/python3", "-u", "-m", "http.server", "--bind", "127.0.0.1", str(port)], session="ppA")
        read_until(srv, b"Serving HTTP")
        probe = ["/usr/bin/python3", "-c", PROBE % port]
        # A later command of the same session reaches it on the session's loopback...
        r = c.exec(probe, session="ppA", timeout=30)
        self.assertEqual(r.stdout.strip(), b"200", r)
        # ...another session's loopback is another one.
        r = c.exec(probe, session="ppB", timeout=30)
        self.assertTrue(r.stdout.startswith(b"unreachable"), r)
        c.forget("ppA")
        with self.assertRaises(SandboxError) as cm:
            srv.read(timeout=0)
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual(c.processes("ppA"), [])
        r = c.exec(probe, session="ppA", timeout=30)
        self.assertTrue(r.stdout.startswith(b"unreachable"), r)


if __name__ == "__main__":
    unittest.main()
