"""The files API (client.files, AsyncClient.files) against a real
`aleph-sandbox serve` running commands in the real sandbox: what the API
writes, a sandboxed command of the session reads, and the other way
round; links planted by a sandboxed command never lead the API out."""

import asyncio
import hashlib
import io
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from aleph_sandbox import AsyncClient, Client, FileInfo, SandboxError  # noqa: E402
from test_client import BIN, Server  # noqa: E402


def setUpModule():
    if shutil.which("bwrap") is None:
        raise unittest.SkipTest("bubblewrap (bwrap) is not installed: the client is tested against the real sandbox")
    if not os.access(os.path.join(BIN, "aleph-sandbox"), os.X_OK):
        raise RuntimeError("bin/aleph-sandbox is missing: run make build first")


class FilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A small files limit, so the limit's refusal is cheap to reach.
        cls.server = Server(config="files_max_bytes = %d\n" % (3 << 20))
        # The approver answers the spawn requests of the commands that
        # plant files.
        cls.c = Client("unix:" + cls.server.sock, approver=lambda r: True)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_write_read_list_stat_remove(self):
        c, S = self.c, "pyfiles1"
        info = c.files.write(S, "src/hello.txt", b"hello\n", mode=0o640)
        self.assertEqual((info.name, info.kind, info.size, info.mode), ("hello.txt", "file", 6, 0o640))
        # The sandboxed command of the session sees the file in its
        # workspace (its working directory).
        r = c.exec(["/bin/cat", "src/hello.txt"], session=S)
        self.assertEqual((r.exit_code, r.stdout), (0, b"hello\n"))
        # And what a command writes, the API reads.
        r = c.exec(["/bin/sh", "-c", "printf 'from the sandbox' > made.txt"], session=S, spawn=True)
        self.assertEqual(r.exit_code, 0, r.stderr)
        self.assertEqual(c.files.read(S, "made.txt"), b"from the sandbox")
        names = {e.name: e for e in c.files.list(S)}
        self.assertEqual(names["src"].kind, "dir")
        self.assertEqual(names["made.txt"].kind, "file")
        self.assertIsInstance(names["made.txt"], FileInfo)
        self.assertEqual(names["made.txt"].size, len(b"from the sandbox"))
        st = c.files.stat(S, "src/hello.txt")
        self.assertEqual(st.size, 6)
        self.assertGreater(st.mtime, 1e9)
        c.files.write(S, "text.txt", "unicode é")
        self.assertEqual(c.files.read(S, "text.txt"), "unicode é".encode())
        with self.assertRaises(SandboxError) as e:
            c.files.remove(S, "src")
        self.assertEqual(e.exception.reason_code, "not_empty")
        c.files.remove(S, "src", recursive=True)
        with self.assertRaises(SandboxError) as e:
            c.files.stat(S, "src")
        self.assertEqual((e.exception.code, e.exception.reason_code), ("not_found", "not_found"))

    def test_large_file_streams_in_parts(self):
        c, S = self.c, "pyfiles2"
        data = os.urandom(2 << 20) + b"end"
        # A file object is read in parts; the upload is one atomic write.
        info = c.files.write(S, "big.bin", io.BytesIO(data))
        self.assertEqual(info.size, len(data))
        chunks = list(c.files.read_stream(S, "big.bin"))
        self.assertGreater(len(chunks), 1)
        self.assertEqual(b"".join(chunks), data)
        r = c.exec(["/usr/bin/wc", "-c", "big.bin"], session=S)
        self.assertEqual(r.stdout.split()[0], str(len(data)).encode())
        # Over files_max_bytes: refused, typed, with the limit's name; the
        # old file stays whole.
        with self.assertRaises(SandboxError) as e:
            c.files.write(S, "big.bin", b"x" * ((3 << 20) + 1))
        self.assertEqual((e.exception.code, e.exception.reason_code, e.exception.field),
                         ("resource_exhausted", "resource_exhausted", "serve.files_max_bytes"))
        self.assertEqual(c.files.stat(S, "big.bin").size, len(data))
        self.assertEqual([e.name for e in c.files.list(S)], ["big.bin"])

    def test_links_planted_by_the_sandbox_never_lead_out(self):
        c, S = self.c, "pyfiles3"
        secret = os.path.join(self.server.dir, "host-secret")
        with open(secret, "w") as f:
            f.write("host secret")
        # The command really runs: it plants links to the host's files and
        # a file of its own, and says so.
        r = c.exec(["/bin/sh", "-c", "ln -s %s out && ln -s / root && ln -s ../../.. up && echo inside > own && echo planted" % secret],
                   session=S, spawn=True)
        self.assertEqual((r.exit_code, r.stdout), (0, b"planted\n"), r.stderr)
        for p in ("out", "root/etc/passwd", "up/host-secret"):
            with self.assertRaises(SandboxError) as e:
                c.files.read(S, p)
            self.assertEqual((e.exception.code, e.exception.reason_code), ("permission_denied", "link_refused"), p)
        with self.assertRaises(SandboxError) as e:
            c.files.write(S, "root/tmp/planted-by-files-api", b"x")
        self.assertEqual(e.exception.reason_code, "link_refused")
        self.assertFalse(os.path.exists("/tmp/planted-by-files-api"))
        # A link is listed as a link, with its target.
        out = [e for e in c.files.list(S) if e.name == "out"][0]
        self.assertEqual((out.kind, out.target), ("link", secret))
        # Positive control: the command's own file reads.
        self.assertEqual(c.files.read(S, "own"), b"inside\n")
        # Writing over the link replaces the link; the host's file is intact.
        c.files.write(S, "out", b"mine")
        with open(secret) as f:
            self.assertEqual(f.read(), "host secret")
        # Absolute paths and .. are refused before anything is opened.
        for p in ("/etc/passwd", "../x", "a/../../x"):
            with self.assertRaises(SandboxError) as e:
                c.files.read(S, p)
            self.assertEqual((e.exception.code, e.exception.field), ("invalid_argument", "path"), p)

    def test_protected_entries_and_special_files(self):
        c, S = self.c, "pyfiles4"
        r = c.exec(["/bin/sh", "-c", "mkfifo pipe && echo ok"], session=S, spawn=True)
        self.assertEqual(r.stdout, b"ok\n", r.stderr)
        with self.assertRaises(SandboxError) as e:
            c.files.read(S, "pipe")
        self.assertEqual(e.exception.reason_code, "not_regular")
        self.assertEqual([x.kind for x in c.files.list(S) if x.name == "pipe"], ["other"])
        for p, entry in ((".git/hooks/pre-commit", ".git"), (".vscode/tasks.json", ".vscode"), ("sub/.envrc", ".envrc")):
            with self.assertRaises(SandboxError) as e:
                c.files.write(S, p, b"#!/bin/sh\necho pwned\n")
            self.assertEqual((e.exception.code, e.exception.reason_code, e.exception.rule),
                             ("permission_denied", "protected_entry", entry), p)
        # The sandbox made no .git either way; a file named like one is fine.
        c.files.write(S, "notes.git.txt", b"ok")
        self.assertEqual(sorted(x.name for x in c.files.list(S)), ["notes.git.txt", "pipe"])

    def test_named_workspace(self):
        # A workspace the caller names, as exec names one: a command run
        # there writes a file, the files API reads, lists and stats it
        # there (the session's own workspace does not have it), a write
        # lands there and is searched for a planted repository (the same
        # write without a workspace lands in the session's own), a remove
        # there is served,
        # and a relative name is refused.
        import tempfile
        c, S = self.c, "pyfiles-named"
        with tempfile.TemporaryDirectory() as ws:
            r = c.exec(["/bin/sh", "-c", "printf named > n.txt"], session=S, workspace=ws, spawn=True)
            self.assertEqual(r.exit_code, 0, r.stderr)
            self.assertEqual(c.files.read(S, "n.txt", workspace=ws), b"named")
            self.assertEqual([e.name for e in c.files.list(S, workspace=ws)], ["n.txt"])
            self.assertEqual(c.files.stat(S, "n.txt", workspace=ws).size, 5)
            with self.assertRaises(SandboxError) as e:
                c.files.stat(S, "n.txt")
            self.assertEqual(e.exception.reason_code, "not_found")
            c.files.write(S, "w.txt", b"x", workspace=ws)
            with open(os.path.join(ws, "w.txt"), "rb") as f:
                self.assertEqual(f.read(), b"x")
            # A HEAD git would accept, written there, is renamed aside
            # (searched as a command's writes are).
            c.files.write(S, "r/HEAD", b"ref: refs/heads/main\n", workspace=ws, parents=True)
            self.assertTrue(os.path.exists(os.path.join(ws, "r", "HEAD.aleph-quarantined")))
            self.assertFalse(os.path.exists(os.path.join(ws, "r", "HEAD")))
            c.files.write(S, "w2.txt", b"y")
            self.assertEqual(c.files.read(S, "w2.txt"), b"y")
            self.assertFalse(os.path.exists(os.path.join(ws, "w2.txt")))
            c.files.remove(S, "n.txt", workspace=ws)
            self.assertFalse(os.path.exists(os.path.join(ws, "n.txt")))
            with self.assertRaises(SandboxError) as e:
                c.files.list(S, workspace="relative/dir")
            self.assertEqual(e.exception.field, "workspace")

    def test_session_header_is_sent(self):
        # Every file call carries X-Aleph-Session: the server compares it
        # with the body, so a call whose body names a session reaches it.
        c = self.c
        c.files.write("pyfiles5", "a", b"1")
        self.assertEqual(c.files.read("pyfiles5", "a"), b"1")
        with self.assertRaises(ValueError):
            c.files.read("", "a")
        with self.assertRaises(ValueError):
            c.files.write("pyfiles5", "a", b"1", mode=0o17777)


class AsyncFilesTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    async def asyncSetUp(self):
        asyncio.get_running_loop().slow_callback_duration = 10.0

    async def test_async_files(self):
        c, S = AsyncClient("unix:" + self.server.sock), "apyfiles1"
        data = os.urandom((1 << 20) + 10)
        info = await c.files.write(S, "d/big", data)
        self.assertEqual(info.size, len(data))
        self.assertEqual(await c.files.read(S, "d/big"), data)
        chunks = [x async for x in c.files.read_stream(S, "d/big")]
        self.assertGreater(len(chunks), 1)
        self.assertEqual([e.name for e in await c.files.list(S, "d")], ["big"])
        self.assertEqual((await c.files.stat(S, "d")).kind, "dir")
        r = await c.exec(["/usr/bin/sha256sum", "d/big"], session=S)
        self.assertEqual(r.stdout.split()[0].decode(), hashlib.sha256(data).hexdigest())
        with self.assertRaises(SandboxError) as e:
            await c.files.write(S, ".git/config", b"[core]\n")
        self.assertEqual(e.exception.reason_code, "protected_entry")
        await c.files.remove(S, "d", recursive=True)
        self.assertEqual(await c.files.list(S), [])


if __name__ == "__main__":
    unittest.main()
