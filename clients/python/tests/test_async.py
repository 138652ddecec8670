"""aleph_sandbox.AsyncClient against a real `aleph-sandbox serve`: the sync
client's main tests as coroutines, and several calls at once from one
event loop."""

import asyncio
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from aleph_sandbox import AsyncClient, Client, Denied, SandboxError  # noqa: E402
from test_client import BIN, Server  # noqa: E402
from test_remote import PKI, TOKEN  # noqa: E402


def setUpModule():
    if shutil.which("bwrap") is None:
        raise unittest.SkipTest("bubblewrap (bwrap) is not installed: the client is tested against the real sandbox")
    if not os.access(os.path.join(BIN, "aleph-sandbox"), os.X_OK):
        raise RuntimeError("bin/aleph-sandbox is missing: run make build first")


def sandboxed_pids(argv):
    """Host pids whose command line is exactly argv (sandboxed commands are
    visible from the host's pid namespace)."""
    want = b"".join(a.encode() + b"\0" for a in argv)
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if f.read() == want:
                    out.append(int(pid))
        except OSError:
            pass
    return out


class _Quiet(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        # The test loop runs in debug mode, which logs every step slower
        # than 0.1 s: on a loaded machine that is noise, not a finding.
        asyncio.get_running_loop().slow_callback_duration = 10.0


class AsyncClientTest(_Quiet):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.addr = "unix:" + cls.server.sock

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    async def test_exec(self):
        r = await AsyncClient(self.addr).exec(["/bin/sh", "-c", "echo hi; echo err >&2; exit 3"], session="apy1")
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.denied, r.reason_code), (b"hi\n", b"err\n", 3, False, "allowed"))
        self.assertTrue(r.command_id)

    async def test_exec_kwargs_and_limits(self):
        ws = tempfile.mkdtemp()
        try:
            c = AsyncClient(self.addr)
            r = await c.exec(["/bin/sh", "-c", "read x; echo \"$x\"; echo \"$G\"; pwd"], session="apy2", workspace=ws,
                             env={"G": "hello"}, stdin="input\n")
            self.assertEqual(r.stdout.decode().splitlines(), ["input", "hello", ws])
            r = await c.exec(["/bin/sleep", "30"], session="apy2", timeout=0.5)
            self.assertEqual((r.timed_out, r.reason_code), (True, "timeout"))
            r = await c.exec(["/usr/bin/head", "-c", "100000", "/dev/zero"], session="apy2", max_output=1000)
            self.assertTrue(r.truncated)
            self.assertLessEqual(len(r.stdout), 1000)
        finally:
            shutil.rmtree(ws)

    async def test_stream_async_for(self):
        kinds, data = [], {"stdout": b"", "stderr": b""}
        ex = AsyncClient(self.addr).stream(["/bin/sh", "-c", "echo a; echo b >&2; echo c"], session="apy3")
        async for ev in ex:
            kinds.append(ev.kind)
            if ev.kind != "exit":
                data[ev.kind] += ev.data
        self.assertEqual(kinds[-1], "exit")
        self.assertEqual(data, {"stdout": b"a\nc\n", "stderr": b"b\n"})
        self.assertEqual((ex.result.exit_code, ex.result.stdout), (0, b"a\nc\n"))

    async def test_big_output(self):
        # 3 MiB crosses many chunks and frames; it arrives whole and exact.
        n = 3 << 20
        r = await AsyncClient(self.addr).exec(["/usr/bin/head", "-c", str(n), "/dev/urandom"], session="apy-big",
                                              max_output=8 << 20)
        self.assertEqual((r.exit_code, len(r.stdout)), (0, n))

    async def test_signal_and_stdin_stream(self):
        c = AsyncClient(self.addr, approver=lambda req: True)
        ex = c.stream(["/bin/sh", "-c", "trap 'echo bye; exit 3' TERM; echo ready; while :; do sleep 0.1; done"],
                      session="apy4", spawn=True)
        async for ev in ex:
            if ev.data == b"ready\n":
                await ex.signal("TERM")
        self.assertEqual(ex.result.exit_code, 3)
        self.assertIn(b"bye", ex.result.stdout)
        ex = c.stream(["/bin/cat"], session="apy4", stdin_stream=True)
        done = asyncio.ensure_future(ex.wait())
        await asyncio.sleep(0)  # the task sends the call: then write() may follow
        self.assertEqual(await ex.write(b"through stdin\n"), 14)
        await ex.close_stdin()
        r = await done
        self.assertEqual((r.exit_code, r.stdout), (0, b"through stdin\n"))

    async def test_close_cancels_the_command(self):
        # A sleep no other test runs (a valid number of seconds): its argv
        # names it in /proc.
        sleep = ["/bin/sleep", "1000.%d%06d" % (os.getpid(), int(time.time() * 1000) % 1000000)]
        c = AsyncClient(self.addr)
        async with c.stream(["/bin/sh", "-c", "echo up; exec %s %s" % tuple(sleep)], session="apy5") as ex:
            async for ev in ex:
                if ev.data == b"up\n":
                    break
            deadline = time.time() + 20
            while not sandboxed_pids(sleep):
                self.assertLess(time.time(), deadline, "the command never ran")
                await asyncio.sleep(0.05)
        deadline = time.time() + 20
        while sandboxed_pids(sleep):
            self.assertLess(time.time(), deadline, "closing the call left the command running")
            await asyncio.sleep(0.05)
        with self.assertRaises(SandboxError) as cm:
            await ex.wait()
        self.assertEqual(cm.exception.code, "canceled")

    async def test_processes(self):
        c = AsyncClient(self.addr)
        p = await c.start(["/bin/cat"], session="apy6")
        self.assertEqual(await p.write(b"hello\n"), 6)
        out = b""
        while b"hello\n" not in out and not p.exited:
            out += await p.read(timeout=5.0)
        self.assertEqual(out, b"hello\n")
        self.assertIn(p.id, [q["id"] for q in await c.processes("apy6")])
        await p.close_stdin()
        r = await p.wait(timeout=30)
        self.assertEqual(r.exit_code, 0)
        with self.assertRaises(SandboxError) as cm:
            await p.read(timeout=0)
        self.assertEqual((cm.exception.code, cm.exception.reason_code), ("not_found", "process_unknown"))
        q = await c.start(["/bin/sleep", "600"], session="apy6")
        await q.signal("KILL")
        self.assertEqual((await q.wait(timeout=30)).signal, 9)

    async def test_approver_sync_and_coroutine(self):
        seen = []

        def sync_approver(req):
            seen.append(("sync", req.session))
            return req.session == "apy-yes"

        async def async_approver(req):
            await asyncio.sleep(0)
            seen.append(("async", req.session))
            return True

        argv = ["/bin/sh", "-c", "/bin/echo spawned"]
        r = await AsyncClient(self.addr, approver=sync_approver).exec(argv, session="apy-no", spawn=True)
        self.assertEqual((r.denied, r.reason_code), (True, "approval_denied"))
        r = await AsyncClient(self.addr, approver=sync_approver).exec(argv, session="apy-yes", spawn=True)
        self.assertEqual((r.denied, r.stdout), (False, b"spawned\n"))
        r = await AsyncClient(self.addr, approver=async_approver).exec(argv, session="apy-async", spawn=True)
        self.assertEqual((r.denied, r.stdout), (False, b"spawned\n"))
        self.assertEqual(seen, [("sync", "apy-no"), ("sync", "apy-yes"), ("async", "apy-async")])
        with self.assertRaises(Denied):
            await AsyncClient(self.addr).exec(argv, session="apy-none", spawn=True, check=True)

    async def test_start_asks_the_clients_approver(self):
        """start() sends its approval request to the client's approver,
        a plain function or a coroutine function."""
        seen = []

        async def approver(req):
            await asyncio.sleep(0)
            seen.append(req.session)
            return req.session == "apys-yes"

        c = AsyncClient(self.addr, approver=approver)
        argv = ["/bin/sh", "-c", "/bin/echo spawned"]
        r = await (await c.start(argv, session="apys-yes", spawn=True)).wait(timeout=30)
        self.assertEqual((r.denied, r.stdout), (False, b"spawned\n"), r)
        r = await (await c.start(argv, session="apys-no", spawn=True)).wait(timeout=30)
        self.assertEqual((r.denied, r.reason_code), (True, "approval_denied"), r)
        r = await (await AsyncClient(self.addr, approver=lambda req: True).start(argv, session="apys-sync", spawn=True)).wait(timeout=30)
        self.assertEqual((r.denied, r.stdout), (False, b"spawned\n"), r)
        self.assertEqual(seen, ["apys-yes", "apys-no"])
        # Control: no approver, denied.
        r = await (await AsyncClient(self.addr).start(argv, session="apys-none", spawn=True)).wait(timeout=30)
        self.assertEqual((r.denied, r.reason_code), (True, "approval_denied"), r)

    async def test_approvals_stream(self):
        # A second client answers on Approvals what the first does not.
        c = AsyncClient(self.addr)
        answered = []

        async def approve_all():
            async for req in c.approvals():
                answered.append(req.session)
                await c.approve(req.id, True, session=req.session)
                return

        watcher = asyncio.ensure_future(approve_all())
        try:
            deadline = time.time() + 20
            r = None
            while r is None or (r.denied and time.time() < deadline):
                # The watcher may not be connected yet: a denial then is retried.
                r = await c.exec(["/bin/sh", "-c", "/bin/echo ok"], session="apy-watch", spawn=True)
                if r.denied:
                    await asyncio.sleep(0.1)
            self.assertEqual((r.denied, r.stdout), (False, b"ok\n"), r)
            self.assertEqual(answered, ["apy-watch"])
        finally:
            watcher.cancel()

    async def test_errors(self):
        c = AsyncClient(self.addr)
        r = await c.exec(["/bin/sh", "-c", "rm -rf /"], session="apy7")
        self.assertEqual((r.denied, r.exit_code, r.reason_code, r.rule), (True, None, "hook_denied", "rm-root"))
        with self.assertRaises(SandboxError) as cm:
            await c.exec([], session="apy7")
        self.assertEqual((cm.exception.code, cm.exception.field), ("invalid_argument", "argv"))
        with self.assertRaises(SandboxError) as cm:
            await AsyncClient("unix:/nonexistent/aleph.sock").exec(["/bin/true"])
        self.assertEqual(cm.exception.code, "unavailable")
        with self.assertRaises(ValueError):
            c.stream(["/bin/true"], max_output=0)
        with self.assertRaises(TypeError):
            await c.exec("/bin/true")

    async def test_sessions_grants_policy(self):
        c = AsyncClient(self.addr)
        await c.exec(["/bin/true"], session="apy8")
        self.assertIn("apy8", [s["session"] for s in await c.sessions()])
        self.assertTrue((await c.describe("apy8"))["workspace"])
        self.assertEqual((await c.grants("apy8")).get("grants", []), [])
        await c.forget("apy8")
        self.assertNotIn("apy8", [s["session"] for s in await c.sessions()])
        self.assertIn("features", await c.capabilities())
        self.assertEqual((await c.check_policy("rm -rf /"))["verdict"], "block")

    async def test_concurrent_calls_from_one_loop(self):
        # Eight commands at once, each sleeping until all have started (a
        # file each writes, counted by all): they can only finish if the
        # loop runs them side by side, not one after another.
        ws = tempfile.mkdtemp()
        try:
            n = 8
            # Each asks for spawn: eight approvals answered side by side too.
            c = AsyncClient(self.addr, approver=lambda req: True)
            script = ("touch started.$0; i=0; while [ $(ls started.* | wc -l) -lt %d ]; do "
                      "i=$((i+1)); [ $i -gt 600 ] && exit 9; sleep 0.05; done; echo $0") % n

            async def run(i):
                # One session each: a session runs at most 4 commands at once.
                return await c.exec(["/bin/sh", "-c", script, str(i)], session="apy-conc-%d" % i, workspace=ws,
                                    write=[ws], spawn=True)

            results = await asyncio.gather(*(run(i) for i in range(n)))
            self.assertEqual([(r.exit_code, r.stdout) for r in results], [(0, b"%d\n" % i) for i in range(n)])
            # And unary calls interleaved with a running stream.
            # The command reads to the end of its stdin (shell builtins: no
            # spawn), so it is still running when close_stdin comes: ending
            # at its first line raced with that call.
            ex = c.stream(["/bin/sh", "-c", "echo first; read x; echo \"got $x\"; while read y; do :; done"],
                          session="apy-conc-s", stdin_stream=True)
            it = ex.__aiter__()
            self.assertEqual((await it.__anext__()).data, b"first\n")
            verdicts = await asyncio.gather(*(c.check_policy("ls") for _ in range(5)))
            self.assertEqual({v["verdict"] for v in verdicts}, {"allow"})
            await ex.write("y\n")
            await ex.close_stdin()
            r = await ex.wait()
            self.assertEqual((r.exit_code, r.stdout), (0, b"first\ngot y\n"))
        finally:
            shutil.rmtree(ws)


class AsyncRemoteTest(_Quiet):
    """The asyncio client over TCP with TLS and a token."""

    @classmethod
    def setUpClass(cls):
        cls.pki = PKI()
        tokens = cls.pki.path("tokens")
        with open(tokens, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(tokens, 0o600)
        cls.server = Server(config="tokens_file = '%s'\n[serve.tls]\ncert = '%s'\nkey = '%s'\n" % (
            tokens, cls.pki.path("server.pem"), cls.pki.path("server.key")), tcp=True)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.pki.remove()

    async def test_tcp(self):
        c = AsyncClient(self.server.tcp_addr, token=TOKEN, ca_file=self.pki.path("ca.pem"))
        r = await c.exec(["/bin/echo", "remote"], session="atcp")
        self.assertEqual(r.stdout, b"remote\n")
        events = [ev.kind async for ev in c.stream(["/bin/sh", "-c", "echo a; echo b >&2"], session="atcp")]
        self.assertEqual(sorted(events), ["exit", "stderr", "stdout"])
        with self.assertRaises(SandboxError) as cm:
            await AsyncClient(self.server.tcp_addr, token="wrong-token-0123456789",
                              ca_file=self.pki.path("ca.pem")).exec(["/bin/true"], session="atcp")
        self.assertEqual(cm.exception.code, "unauthenticated")
        with self.assertRaises(SandboxError) as cm:
            await AsyncClient(self.server.tcp_addr, token=TOKEN, ca_file=self.pki.path("other.pem")).exec(["/bin/true"])
        self.assertEqual(cm.exception.reason_code, "tls")
        # The synchronous client sees the same server and session.
        self.assertIn("atcp", [s["session"] for s in Client("unix:" + self.server.sock).sessions()])


if __name__ == "__main__":
    unittest.main()
