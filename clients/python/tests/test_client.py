"""Tests of the Python client against a real `aleph-sandbox serve` (the
binaries of bin/, the real bwrap driver)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from aleph_sandbox import Client, Denied, SandboxError, Violation  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# Not an ALEPH_SANDBOX_ name: serve refuses to start beside an unknown one
# (it reads them as mistyped configuration overrides).
BIN = os.environ.get("ALEPH_CLIENT_TEST_BIN", os.path.join(REPO, "bin"))


class Server:
    """A real serve on a private unix socket; with tcp=True also on
    127.0.0.1 (a port of the kernel's choosing, read from its log: tcp_addr
    is "tcp:127.0.0.1:PORT"), config holding what TCP needs."""

    def __init__(self, *extra, config="", tcp=False):
        self.dir = tempfile.mkdtemp(prefix="aleph-py-")
        self.sock = os.path.join(self.dir, "run", "aleph.sock")
        env = dict(os.environ)
        data = os.path.join(self.dir, "data")
        env.update({
            "XDG_DATA_HOME": data,
            "XDG_CONFIG_HOME": os.path.join(self.dir, "config"),
            "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT": os.path.join(data, "ws"),
            "ALEPH_SANDBOX_SANDBOX__AUDIT_LOG": "",
        })
        env.pop("ALEPH_SANDBOX_HOST", None)
        # Some tests stream more than the default output ceiling (1 MiB).
        os.makedirs(os.path.join(self.dir, "config", "aleph-sandbox"))
        with open(os.path.join(self.dir, "config", "aleph-sandbox", "config.toml"), "w") as f:
            f.write("[serve]\nmax_output_bytes = %d\n" % (16 << 20) + config)
        self.log = open(os.path.join(self.dir, "serve.log"), "wb")
        listen = ["--listen", "unix:" + self.sock] + (["--listen", "tcp:127.0.0.1:0"] if tcp else [])
        self.proc = subprocess.Popen([os.path.join(BIN, "aleph-sandbox"), "serve"] + listen + list(extra),
                                     env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        self.tcp_addr = ""
        deadline = time.time() + 20
        while True:
            try:
                Client("unix:" + self.sock).check_policy("true")
                if tcp:
                    m = re.search(r"tcp=(127\.0\.0\.1:[0-9]+)", self.stderr())
                    if m is None:
                        raise SandboxError("no tcp listener in the log yet")
                    self.tcp_addr = "tcp:" + m.group(1)
                return
            except SandboxError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise RuntimeError("serve did not start: " + self.stderr())
                time.sleep(0.05)

    def stderr(self):
        with open(os.path.join(self.dir, "serve.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def setUpModule():
    if shutil.which("bwrap") is None:
        raise unittest.SkipTest("bubblewrap (bwrap) is not installed: the client is tested against the real sandbox")
    if not os.access(os.path.join(BIN, "aleph-sandbox"), os.X_OK):
        raise RuntimeError("bin/aleph-sandbox is missing: run make build first")


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.addr = "unix:" + cls.server.sock

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_server_says_which_serve(self):
        # The serve this test started answers: its pid (as the kernel
        # reports the listener) and the line it wrote about itself.
        s = Client(self.addr).server()
        self.assertEqual(s["pid"], self.server.proc.pid)
        self.assertEqual(s["socket"], self.server.sock)
        self.assertTrue(s["owner"].startswith("pid %d, version " % self.server.proc.pid), s)
        self.assertIn(", data dir ", s["owner"])

    def test_exec(self):
        r = Client(self.addr).exec(["/bin/sh", "-c", "echo hi; echo err >&2; exit 3"], session="py1")
        self.assertEqual(r.stdout, b"hi\n")
        self.assertEqual(r.stderr, b"err\n")
        self.assertEqual(r.exit_code, 3)
        self.assertFalse(r.denied)
        self.assertTrue(r.command_id)
        self.assertEqual(r.reason_code, "allowed")

    def test_usage(self):
        """Each result says what the command consumed: CPU time and peak
        RSS, as the driver measured them."""
        c = Client(self.addr)
        burn = ("x = bytearray(96 << 20)\n"
                "for i in range(0, len(x), 4096): x[i] = 1\n"
                "s = 0\n"
                "for i in range(2000000): s += i\n")
        r = c.exec(["/usr/bin/python3", "-c", burn], session="py-usage", timeout=120)
        self.assertEqual(r.exit_code, 0, r.stderr)
        self.assertIsInstance(r.usage.cpu_ms, int)
        self.assertGreater(r.usage.cpu_ms, 0, r.usage)
        self.assertEqual(r.usage.cpu_ms, r.usage.user_ms + r.usage.system_ms)
        self.assertGreaterEqual(r.usage.max_rss_kb, 96 << 10, r.usage)
        # Control: a small command's peak is far below.
        small = c.exec(["/bin/true"], session="py-usage")
        self.assertLess(small.usage.max_rss_kb, 32 << 10, small.usage)
        self.assertGreater(small.usage.max_rss_kb, 0, small.usage)
        # A denial ran nothing: no usage.
        d = c.exec(["/bin/sh", "-c", "rm -rf /"], session="py-usage")
        self.assertTrue(d.denied)
        self.assertEqual((d.usage.cpu_ms, d.usage.max_rss_kb), (0, 0))

    def test_delete_session(self):
        """delete() ends the session's processes and removes its workspace,
        its kept grants and its HOME; forget() keeps the workspace (the
        control)."""
        c = Client(self.addr, approver=lambda req: True)
        for name in ("py-del", "py-forget"):
            r = c.exec(["/bin/sh", "-c", "echo data > kept.txt"], session=name, spawn=True)
            self.assertEqual(r.exit_code, 0, r.stderr)
        ws = c.describe("py-del")["workspace"]
        ws_forget = c.describe("py-forget")["workspace"]
        self.assertTrue(os.path.isfile(os.path.join(ws, "kept.txt")))
        self.assertEqual(len(c.grants("py-del").get("grants", [])), 1)
        p = c.start(["/bin/sleep", "600"], session="py-del")
        self.assertEqual([x["id"] for x in c.processes("py-del")], [p.id])
        c.delete("py-del")
        self.assertFalse(os.path.exists(ws), "the workspace is still there")
        self.assertEqual(c.processes("py-del"), [])
        self.assertEqual(c.grants("py-del").get("grants", []), [])
        self.assertNotIn("py-del", [x.get("session") for x in c.sessions()])
        c.forget("py-forget")
        self.assertTrue(os.path.isfile(os.path.join(ws_forget, "kept.txt")))
        # A deleted session starts afresh: its file is gone.
        r = c.exec(["/usr/bin/test", "-e", "kept.txt"], session="py-del")
        self.assertEqual(r.exit_code, 1)
        self.assertEqual(c.exec(["/usr/bin/test", "-e", "kept.txt"], session="py-forget").exit_code, 0)

    def test_sessions_lists_kept_ones(self):
        """sessions() lists the sessions kept on disk, not only those this
        serve has seen: here one a CLI run approved, and one whose
        workspace a CLI run made; both marked persistedOnly."""
        env = dict(os.environ)
        data = os.path.join(self.server.dir, "data")
        env.update({"XDG_DATA_HOME": data, "XDG_CONFIG_HOME": os.path.join(self.server.dir, "config"),
                    "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT": os.path.join(data, "ws"), "ALEPH_SANDBOX_SANDBOX__AUDIT_LOG": ""})
        env.pop("ALEPH_SANDBOX_HOST", None)
        out = subprocess.run([os.path.join(BIN, "aleph-sandbox"), "exec", "--session", "py-kept-elsewhere", "--spawn", "--yes",
                              "--", "/bin/sh", "-c", "true"], env=env, capture_output=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        # And one whose only trace is its workspace (no grant was asked):
        # listed from the record written beside it.
        out = subprocess.run([os.path.join(BIN, "aleph-sandbox"), "exec", "--session", "py-ws-only",
                              "--", "/bin/true"], env=env, capture_output=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        c = Client(self.addr)
        self.assertEqual(c.exec(["/bin/true"], session="py-held").exit_code, 0)
        listed = {x.get("session"): x for x in c.sessions()}
        self.assertIn("py-kept-elsewhere", listed)
        self.assertEqual(len(listed["py-kept-elsewhere"].get("grants", [])), 1)
        self.assertIn("py-ws-only", listed)
        self.assertEqual(listed["py-ws-only"].get("grants", []), [])
        # Neither is active on this serve; the one it ran is (the control).
        self.assertTrue(listed["py-kept-elsewhere"].get("persistedOnly"), listed["py-kept-elsewhere"])
        self.assertTrue(listed["py-ws-only"].get("persistedOnly"), listed["py-ws-only"])
        self.assertFalse(listed["py-held"].get("persistedOnly", False), listed["py-held"])

    def test_violations(self):
        """What the sandbox refused a command is in its result: a denied
        syscall (the command ran and got EPERM) as a Violation; an allowed
        command has none, and the watched kinds say that none means none."""
        c = Client(self.addr)
        r = c.exec(["/usr/bin/unshare", "-U", "/bin/true"], session="py-violations")
        self.assertNotEqual(r.exit_code, 0)
        self.assertIn("Operation not permitted", r.stderr.decode())
        got = [v for v in r.violations if v.kind == "syscall"]
        self.assertEqual(len(got), 1, r.violations)
        self.assertIsInstance(got[0], Violation)
        self.assertEqual((got[0].operation, got[0].target, got[0].count), ("syscall", "unshare", 1))
        self.assertIn("syscall", r.violation_kinds)
        self.assertEqual(r.violations_dropped, 0)
        # Control: a command that ran and was refused nothing.
        ok = c.exec(["/bin/echo", "ran"], session="py-violations")
        self.assertEqual((ok.exit_code, ok.stdout), (0, b"ran\n"))
        self.assertEqual(ok.violations, [])
        self.assertIn("syscall", ok.violation_kinds)

    def test_exec_kwargs(self):
        ws = tempfile.mkdtemp()
        try:
            with open(os.path.join(ws, "in.txt"), "w") as f:
                f.write("file")
            os.mkdir(os.path.join(ws, "sub"))
            r = Client(self.addr).exec(["/bin/sh", "-c", "read x; echo \"$x\"; echo \"$GREETING\"; pwd; read y < ../in.txt; echo \"$y\""],
                                       session="py2", workspace=ws, cwd="sub", env={"GREETING": "hello"}, stdin="input\n")
            self.assertEqual(r.stdout.decode().splitlines(), ["input", "hello", os.path.join(ws, "sub"), "file"])
        finally:
            shutil.rmtree(ws)

    def test_timeout_and_output_limit(self):
        c = Client(self.addr)
        r = c.exec(["/bin/sleep", "30"], session="py3", timeout=0.5)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.reason_code, "timeout")
        r = c.exec(["/usr/bin/head", "-c", "100000", "/dev/zero"], session="py3", max_output=1000)
        self.assertTrue(r.truncated, r)
        self.assertLessEqual(len(r.stdout), 1000)

    def test_stream_in_order(self):
        kinds = []
        data = {"stdout": b"", "stderr": b""}
        result = None
        for ev in Client(self.addr).stream(["/bin/sh", "-c", "echo a; echo b >&2"], session="py4"):
            kinds.append(ev.kind)
            if ev.kind == "exit":
                result = ev.result
            else:
                data[ev.kind] += ev.data
        self.assertEqual(kinds[-1], "exit")
        self.assertEqual(data, {"stdout": b"a\n", "stderr": b"b\n"})
        self.assertEqual(result.exit_code, 0)
        self.assertEqual(result.stdout, b"a\n")

    def test_big_output_sent_once(self):
        # 5 MiB of every byte value arrives whole and exact; the final
        # message on the wire does not repeat it: it says the output was
        # streamed, and how much, so an empty result reads as "streamed".
        n = 5 << 20
        want = (bytes(range(256)) * (n // 256 + 1))[:n]
        argv = ["/usr/bin/python3", "-c", "import sys; p=bytes(range(256)); "
                "sys.stdout.buffer.write((p*(%d//256+1))[:%d]); sys.stdout.flush(); sys.stderr.write('done')" % (n, n)]
        c = Client(self.addr)
        wire = []
        stream = c._stream

        def spy(method, msg, timeout, **kw):
            for m in stream(method, msg, timeout, **kw):
                if "result" in m:
                    wire.append(m["result"])
                yield m
        c._stream = spy  # type: ignore[assignment]
        r = c.exec(argv, session="py-big", max_output=16 << 20)
        self.assertEqual(r.exit_code, 0, r.stderr)
        self.assertEqual(len(r.stdout), n)
        self.assertTrue(r.stdout == want, "the output differs from what the command wrote")
        self.assertEqual(r.stderr, b"done")
        self.assertEqual(len(wire), 1)
        self.assertNotIn("stdout", wire[0])
        self.assertNotIn("stderr", wire[0])
        self.assertTrue(wire[0].get("outputStreamed"), wire[0])
        self.assertEqual(int(wire[0].get("streamedStdoutBytes", 0)), n)
        self.assertEqual(int(wire[0].get("streamedStderrBytes", 0)), 4)

    def test_policy_denial_is_typed(self):
        c = Client(self.addr)
        r = c.exec(["/bin/sh", "-c", "rm -rf /"], session="py5")
        self.assertTrue(r.denied)
        self.assertIsNone(r.exit_code)  # no process ran: never read as 0
        self.assertEqual(r.reason_code, "hook_denied")
        self.assertEqual(r.rule, "rm-root")
        with self.assertRaises(Denied) as cm:
            c.exec(["/bin/sh", "-c", "rm -rf /"], session="py5", check=True)
        self.assertEqual(cm.exception.rule, "rm-root")
        # Positive control: check=True on an allowed command returns.
        self.assertEqual(c.exec(["/bin/echo", "ok"], session="py5", check=True).stdout, b"ok\n")

    def test_approver_callback(self):
        seen = []

        def approver(req):
            seen.append(req)
            return req.session == "py-yes"

        c = Client(self.addr, approver=approver)
        r = c.exec(["/bin/sh", "-c", "/bin/echo spawned"], session="py-no", spawn=True)
        self.assertTrue(r.denied)
        self.assertEqual(r.reason_code, "approval_denied")
        r = c.exec(["/bin/sh", "-c", "/bin/echo spawned"], session="py-yes", spawn=True)
        self.assertFalse(r.denied, r)
        self.assertEqual(r.stdout, b"spawned\n")
        self.assertEqual([s.session for s in seen], ["py-no", "py-yes"])
        self.assertTrue(seen[1].requested.get("spawn"))
        self.assertIn("subprocesses", seen[1].summary)
        # The grant is kept: the next command asks nobody.
        g = c.grants("py-yes")
        self.assertEqual(len(g.get("grants", [])), 1)
        r = c.exec(["/bin/sh", "-c", "/bin/echo again"], session="py-yes", spawn=True)
        self.assertEqual((r.stdout, len(seen)), (b"again\n", 2))

    def test_no_approver_denies(self):
        r = Client(self.addr).exec(["/bin/sh", "-c", "/bin/echo x"], session="py6", spawn=True)
        self.assertTrue(r.denied)
        self.assertEqual(r.reason_code, "approval_denied")

    def test_invalid_argument(self):
        with self.assertRaises(SandboxError) as cm:
            Client(self.addr).exec([], session="py7")
        self.assertEqual(cm.exception.code, "invalid_argument")
        self.assertEqual(cm.exception.field, "argv")
        with self.assertRaises(SandboxError) as cm:
            Client(self.addr).exec(["/bin/true"], session="py7", net="exa mple.com")
        self.assertEqual((cm.exception.code, cm.exception.field), ("invalid_argument", "net"))

    def test_host_list_reaches_the_service_as_a_list(self):
        # A list of hosts travels as net_hosts: a host the service refuses
        # is named by its place in the list.
        c = Client(self.addr)
        with self.assertRaises(SandboxError) as cm:
            c.exec(["/bin/true"], session="py-hosts", net=["a.example", "exa mple.com"])
        self.assertEqual((cm.exception.code, cm.exception.field), ("invalid_argument", "net_hosts[1]"))
        # The control: a list the service takes reaches the pipeline's
        # decision (without an approver, a denial).
        r = c.exec(["/bin/true"], session="py-hosts", net=["a.example"])
        self.assertTrue(r.denied, r)

    def test_socket_dir_grant_refused(self):
        with self.assertRaises(SandboxError) as cm:
            Client(self.addr, approver=lambda r: True).exec(["/bin/ls", os.path.dirname(self.server.sock)], session="py8",
                                                            read=[os.path.dirname(self.server.sock)])
        self.assertEqual((cm.exception.code, cm.exception.reason_code), ("permission_denied", "protected_path"))

    def test_sessions_capabilities_policy(self):
        c = Client(self.addr)
        c.exec(["/bin/true"], session="py9")
        self.assertIn("py9", [s["session"] for s in c.sessions()])
        d = c.describe("py9")
        self.assertTrue(d["workspace"])
        self.assertTrue(d["policyDigest"])
        c.forget("py9")
        self.assertNotIn("py9", [s["session"] for s in c.sessions()])
        self.assertIn("features", c.capabilities())
        self.assertEqual(c.check_policy("rm -rf /")["verdict"], "block")
        self.assertEqual(c.check_policy("ls")["verdict"], "allow")

    def test_concurrent(self):
        c = Client(self.addr)
        errors = []

        def run(i):
            try:
                # One session per thread: a session runs at most 4 commands at once.
                r = c.exec(["/bin/echo", str(i)], session="py-conc-%d" % i)
                if r.stdout != ("%d\n" % i).encode():
                    errors.append((i, r))
            except Exception as e:  # collected, reported below
                errors.append((i, e))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_unreachable(self):
        with self.assertRaises(SandboxError) as cm:
            Client("unix:/nonexistent/aleph.sock").exec(["/bin/true"])
        self.assertEqual(cm.exception.code, "unavailable")


class YesServerTest(unittest.TestCase):
    def test_yes_approves(self):
        s = Server("--yes")
        try:
            r = Client("unix:" + s.sock).exec(["/bin/sh", "-c", "/bin/echo spawned"], session="y", spawn=True)
            self.assertEqual((r.denied, r.stdout), (False, b"spawned\n"))
        finally:
            s.stop()

    def test_spawn_refused(self):
        # A command without spawn=True that starts a process: it runs, the
        # sandbox refuses the fork where it happens, and the result says
        # so (reason_code, count, a hint naming spawn=True). With spawn it
        # runs (the control); a command that starts nothing says allowed.
        s = Server("--yes")
        try:
            c = Client("unix:" + s.sock)
            attempts = [["/bin/sh", "-c", "true & wait"]]
            if os.path.exists("/usr/bin/python3"):
                attempts.append(["/usr/bin/python3", "-c", "import subprocess; subprocess.run(['true'])"])
            for argv in attempts:
                r = c.exec(argv, session="spawn")
                self.assertNotEqual(r.exit_code, 0, r)
                self.assertTrue(r.stderr, r)
                self.assertEqual(r.reason_code, "spawn_refused", r)
                self.assertGreaterEqual(r.spawn_refused, 1, r)
                self.assertIn("spawn=True", r.hint)
                r = c.exec(argv, session="spawn", spawn=True)
                self.assertEqual((r.exit_code, r.reason_code, r.spawn_refused, r.hint), (0, "allowed", 0, ""), r)
            r = c.exec(["/bin/echo", "no fork"], session="spawn")
            self.assertEqual((r.exit_code, r.reason_code, r.spawn_refused, r.hint), (0, "allowed", 0, ""), r)
        finally:
            s.stop()


class DefaultTimeoutTest(unittest.TestCase):
    """timeout=0 means "not given": the service's default timeout, here 1 s
    (as in the TypeScript client)."""

    def test_zero_is_the_services_default(self):
        s = Server(config="[sandbox]\ndefault_timeout_seconds = 1\n")
        try:
            c = Client("unix:" + s.sock)
            for t in (0, None):
                r = c.exec(["/bin/sleep", "30"], session="t0", timeout=t)
                self.assertTrue(r.timed_out, (t, r))
                self.assertEqual(r.reason_code, "timeout")
            # Control: a timeout of its own outlasts the default.
            r = c.exec(["/bin/sleep", "2"], session="t0", timeout=60)
            self.assertEqual((r.timed_out, r.exit_code), (False, 0), r)
        finally:
            s.stop()


if __name__ == "__main__":
    unittest.main()
