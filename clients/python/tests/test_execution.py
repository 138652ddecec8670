"""Client.stream's Execution: signalling a running command and streaming
its stdin, against a real `aleph-sandbox serve`; and how signal() treats a
service that does not have the call yet, against a fake one."""

import http.server
import json
import os
import re
import shutil
import socketserver
import struct
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from aleph_sandbox import Client, Denied, Execution, SandboxError  # noqa: E402
from test_client import BIN, Server  # noqa: E402

# Traps TERM; otherwise waits for a line on its stdin.
TRAP = "trap 'echo got-term; exit 3' TERM; echo ready; read line; echo \"done $line\""

# The same in Python, for a command whose stdin is not a stream: it sleeps
# argv[1] seconds instead of reading.
PY_TRAP = ("import signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *a: (print('got-term'), sys.exit(3)))\n"
           "print('ready')\n"
           "time.sleep(float(sys.argv[1]))\n"
           "print('done')\n")


def setUpModule():
    if shutil.which("bwrap") is None:
        raise unittest.SkipTest("bubblewrap (bwrap) is not installed: the client is tested against the real sandbox")
    if not os.access(os.path.join(BIN, "aleph-sandbox"), os.X_OK):
        raise RuntimeError("bin/aleph-sandbox is missing: run make build first")


def run(ex, on_event):
    """Iterates ex, calling on_event(ex, event, output so far); returns
    (stdout, stderr, result)."""
    out = {"stdout": b"", "stderr": b""}
    result = None
    for ev in ex:
        if ev.kind == "exit":
            result = ev.result
            continue
        out[ev.kind] += ev.data
        on_event(ex, ev, out)
    if result is None:
        raise AssertionError("no exit event")
    return out["stdout"], out["stderr"], result


def poll(what, cond, limit=20.0):
    deadline = time.time() + limit
    while not cond():
        if time.time() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def processes_with(argv):
    want = ("\0".join(argv) + "\0").encode()
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if f.read() == want:
                        found.append(int(pid))
            except OSError:
                pass
    return found


class ExecutionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.addr = "unix:" + cls.server.sock

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_signal_runs_the_commands_trap(self):
        c = Client(self.addr)

        def term_when_ready(ex, ev, out):
            if out["stdout"] == b"ready\n":
                ex.signal("TERM")

        ex = c.stream(["/usr/bin/python3", "-u", "-c", PY_TRAP, "60"], session="pe1", timeout=120)
        self.assertIsInstance(ex, Execution)
        stdout, _, r = run(ex, term_when_ready)
        self.assertEqual((stdout, r.exit_code, r.signal), (b"ready\ngot-term\n", 3, 0), r)
        self.assertIs(ex.result, r)
        # Positive control: unsignalled, it runs to its end.
        stdout, _, r = run(c.stream(["/usr/bin/python3", "-u", "-c", PY_TRAP, "0"], session="pe1"), lambda *a: None)
        self.assertEqual((stdout, r.exit_code), (b"ready\ndone\n", 0), r)

    def test_signal_a_shell_reading_its_streamed_stdin(self):
        c = Client(self.addr)

        def term_when_ready(ex, ev, out):
            if out["stdout"] == b"ready\n":
                ex.signal("SIGTERM")

        stdout, _, r = run(c.stream(["/bin/sh", "-c", TRAP], session="pe2", stdin_stream=True), term_when_ready)
        self.assertEqual((stdout, r.exit_code), (b"ready\ngot-term\n", 3), r)

        # Positive control: the same command given its line ends by itself.
        def answer_when_ready(ex, ev, out):
            if out["stdout"] == b"ready\n":
                self.assertEqual(ex.write("x\n"), 2)

        stdout, _, r = run(c.stream(["/bin/sh", "-c", TRAP], session="pe2", stdin_stream=True), answer_when_ready)
        self.assertEqual((stdout, r.exit_code), (b"ready\ndone x\n", 0), r)

    def test_an_unhandled_signal_ends_the_command(self):
        def kill_when_ready(ex, ev, out):
            if out["stdout"] == b"ready\n":
                ex.signal("KILL")

        _, _, r = run(Client(self.addr).stream(["/bin/sh", "-c", TRAP], session="pe3", stdin_stream=True), kill_when_ready)
        self.assertEqual(r.signal, 9, r)

    def test_stdin_stream_round_trip(self):
        c = Client(self.addr)
        # More than one WriteStdin takes (1 MiB) and the service holds (64 KiB).
        big = os.urandom(3 << 20)
        ex = c.stream(["/bin/sh", "-c", "echo ready; exec /bin/cat"], session="pe4", stdin_stream=True, max_output=8 << 20)
        written = []

        def feed():
            written.append(ex.write(b"one\n"))
            written.append(ex.write(big))
            ex.close_stdin()

        # From another thread: cat's output must be read while it is fed.
        writer = threading.Thread(target=feed)

        def start_writing(ex, ev, out):
            if out["stdout"] == b"ready\n":
                writer.start()

        stdout, _, r = run(ex, start_writing)
        writer.join()
        self.assertEqual((r.exit_code, r.truncated), (0, False), r)
        self.assertEqual(written, [4, len(big)])
        self.assertTrue(stdout == b"ready\none\n" + big, "%d bytes of output" % len(stdout))

    def test_wait_is_exec(self):
        c = Client(self.addr)
        r = c.stream(["/bin/sh", "-c", "echo out; echo err >&2; exit 4"], session="pe5").wait()
        self.assertEqual((r.stdout, r.stderr, r.exit_code), (b"out\n", b"err\n", 4))
        ex = c.stream(["/bin/sh", "-c", "rm -rf /"], session="pe5")
        with self.assertRaises(Denied) as cm:
            ex.wait(check=True)
        self.assertEqual(cm.exception.rule, "rm-root")
        # Ended: wait answers again, signal says it is not running.
        self.assertTrue(ex.wait().denied)
        with self.assertRaises(SandboxError) as cm:
            ex.signal("TERM")
        self.assertEqual((cm.exception.code, cm.exception.reason_code), ("not_found", "not_running"))

    def test_misuse_is_a_typed_error(self):
        c = Client(self.addr)
        ex = c.stream(["/bin/echo", "hi"], session="pe6")
        # Nothing sent before the iteration: nothing to signal.
        with self.assertRaises(SandboxError) as cm:
            ex.signal("TERM")
        self.assertEqual(cm.exception.reason_code, "not_running")
        self.assertRaises(TypeError, ex.write, b"x")          # stdin is not a stream
        self.assertRaises(TypeError, ex.close_stdin)
        self.assertRaises(ValueError, ex.signal, "STOP")
        self.assertEqual(ex.wait().stdout, b"hi\n")
        self.assertRaises(TypeError, c.stream, ["/bin/cat"], stdin="x", stdin_stream=True)
        self.assertRaises(TypeError, c.stream, ["/bin/cat"], stdin_stream="yes")
        self.assertRaises(TypeError, c.exec, ["/bin/cat"], stdin_stream=True)
        # Each command has its own unguessable key.
        a, b = c.stream(["/bin/true"]), c.stream(["/bin/true"])
        self.assertRegex(a.signal_key, r"^sig-[0-9a-f]{32}$")
        self.assertNotEqual(a.signal_key, b.signal_key)

    def test_close_cancels_the_command(self):
        argv = ["/bin/sleep", "1000.%d%d" % (os.getpid(), threading.get_ident() % 100000)]
        with Client(self.addr).stream(["/bin/sh", "-c", "echo started; exec " + " ".join(argv)], session="pe7") as ex:
            self.assertEqual(next(ex).data, b"started\n")
            # Positive control: the command really runs before it is cancelled.
            poll("the sandboxed sleep to start", lambda: processes_with(argv))
        with self.assertRaises(SandboxError) as cm:
            ex.wait()
        self.assertEqual(cm.exception.code, "canceled")
        poll("the cancelled command to be killed", lambda: not processes_with(argv))


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        conn, _ = self.socket.accept()
        return conn, ("local", 0)


def _frame(obj, flags=0):
    body = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(body)) + body


class FakeService:
    """Answers Execute and Signal as scripted, recording the requests."""

    def __init__(self, first_output, signal_ok_after):
        self.dir = tempfile.mkdtemp(prefix="aleph-py-fake-")
        self.sock = os.path.join(self.dir, "aleph.sock")
        self.execute = None
        self.executing = threading.Event()
        self.signals = []
        self.release = threading.Event()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                method = self.path.rsplit("/", 1)[-1]
                if method == "Execute":
                    fake.execute = json.loads(body[5:])
                    self.send_response(200)
                    self.send_header("Content-Type", "application/connect+json")
                    self.end_headers()
                    if first_output:
                        self.wfile.write(_frame({"output": {"stream": "STREAM_STDOUT", "data": "cmVhZHkK"}}))
                        self.wfile.flush()
                    fake.executing.set()
                    fake.release.wait(30)
                    self.wfile.write(_frame({"result": {"exitCode": 7}}) + _frame({}, 0x02))
                    return
                fake.signals.append(json.loads(body))
                ok = signal_ok_after is not None and len(fake.signals) > signal_ok_after
                answer = b"{}" if ok else json.dumps({"code": "not_found", "message": "no running command"}).encode()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                if ok or len(fake.signals) == 2 and signal_ok_after is None:
                    fake.release.set()

        self.server = _UnixHTTPServer(self.sock, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        shutil.rmtree(self.dir)


class SignalBeforeTheServiceHasTheCallTest(unittest.TestCase):
    def start(self, first_output, signal_ok_after):
        fake = FakeService(first_output, signal_ok_after)
        self.addCleanup(fake.stop)
        ex = Client("unix:" + fake.sock).stream(["/bin/true"])
        results = []
        reader = threading.Thread(target=lambda: results.append(ex.wait()))
        reader.start()
        self.addCleanup(reader.join)
        self.addCleanup(fake.release.set)  # before the join: the stream ends
        self.assertTrue(fake.executing.wait(30))
        return fake, ex, reader, results

    def test_not_found_is_tried_again_until_the_call_is_there(self):
        fake, ex, reader, results = self.start(first_output=False, signal_ok_after=2)
        ex.signal("TERM")
        reader.join()
        self.assertEqual([s["signal"] for s in fake.signals], ["TERM"] * 3)
        self.assertEqual({s["signalKey"] for s in fake.signals}, {fake.execute["signalKey"]})
        self.assertRegex(fake.execute["signalKey"], r"^sig-[0-9a-f]{32}$")
        self.assertEqual(results[0].exit_code, 7)

    def test_not_found_after_the_first_event_means_ended(self):
        fake, ex, reader, _ = self.start(first_output=True, signal_ok_after=None)
        poll("the reader to have the first event", lambda: ex._state.running)
        with self.assertRaises(SandboxError) as cm:
            ex.signal("TERM")
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual(len(fake.signals), 1)

    def test_a_stream_that_ends_meanwhile_stops_the_tries(self):
        # The fake ends the stream after the second refused signal.
        fake, ex, reader, results = self.start(first_output=False, signal_ok_after=None)
        with self.assertRaises(SandboxError) as cm:
            ex.signal("TERM")
        self.assertEqual((cm.exception.code, cm.exception.reason_code), ("not_found", "not_running"))
        reader.join()
        self.assertGreaterEqual(len(fake.signals), 2)
        self.assertEqual(results[0].exit_code, 7)


if __name__ == "__main__":
    unittest.main()
