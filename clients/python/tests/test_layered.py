"""Layered sessions through a real `aleph-sandbox serve` and the real
sandbox: a layered command's writes stay in its layer until apply, which
brings the ordinary change and refuses the planted ones; discard leaves
the host untouched."""

import asyncio
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from aleph_sandbox import ApplyResult, AsyncClient, Change, Client, SandboxError  # noqa: E402
from test_client import BIN, Server  # noqa: E402


def setUpModule():
    if shutil.which("bwrap") is None:
        raise unittest.SkipTest("bubblewrap (bwrap) is not installed: the client is tested against the real sandbox")
    if not os.access(os.path.join(BIN, "aleph-sandbox"), os.X_OK):
        raise RuntimeError("bin/aleph-sandbox is missing: run make build first")


class LayeredTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.c = Client("unix:" + cls.server.sock, approver=lambda r: True)
        caps = cls.c.capabilities()
        if "layered_workspace" not in caps.get("calls", []):
            # The refusal is typed and says why (capabilities say it too).
            ws = tempfile.mkdtemp()
            try:
                with cls.assertRaises(unittest.TestCase(), SandboxError) as e:
                    cls.c.exec(["/bin/true"], session="pylay-off", workspace=ws, layered=True)
                assert e.exception.reason_code == "layered_unavailable", e.exception
            finally:
                shutil.rmtree(ws)
                cls.server.stop()
            raise unittest.SkipTest("layered sessions unavailable here: %s" % caps.get("details", {}).get("layered_workspace"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.ws = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.ws)
        with open(os.path.join(self.ws, "a.txt"), "w") as f:
            f.write("host\n")

    def test_changes_apply(self):
        c, S = self.c, "pylay1"
        r = c.exec(["/bin/sh", "-c", "echo session > a.txt && echo new > b.txt && mkdir .vscode && echo {} > .vscode/tasks.json"],
                   session=S, workspace=self.ws, layered=True, spawn=True)
        self.assertEqual(r.exit_code, 0, r.stderr)
        with open(os.path.join(self.ws, "a.txt")) as f:
            self.assertEqual(f.read(), "host\n")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "b.txt")))
        ch = {x.path: x.kind for x in c.changes(S)}
        self.assertTrue(all(isinstance(x, Change) for x in c.changes(S)))
        self.assertEqual((ch.get("a.txt"), ch.get("b.txt")), ("modified", "added"), ch)
        self.assertIn("+session", c.diff(S))
        # A live command in the layered session is refused, typed.
        with self.assertRaises(SandboxError) as e:
            c.exec(["/bin/true"], session=S, workspace=self.ws)
        self.assertEqual(e.exception.reason_code, "layered_mode")
        res = c.apply(S)
        self.assertIsInstance(res, ApplyResult)
        self.assertEqual(sorted(res.applied), ["a.txt", "b.txt"], res)
        self.assertEqual([(x.path, x.reason) for x in res.refused],
                         [(".vscode", "protected"), (".vscode/tasks.json", "parent_not_applied")])
        self.assertEqual(res.conflicts, [])
        with open(os.path.join(self.ws, "b.txt")) as f:
            self.assertEqual(f.read(), "new\n")
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".vscode")))

    def test_files_api_on_layered_view(self):
        """The files API on a layered session reads and writes the
        session's view (the overlay its commands see), never the host's
        directory: a command's file is read, a written file is read by a
        command, a removed host file is gone in the session and kept on
        the host; changes lists them, and apply brings them (control)."""
        c, S = self.c, "pylay3"
        with open(os.path.join(self.ws, "gone.txt"), "w") as f:
            f.write("keep\n")
        r = c.exec(["/bin/sh", "-c", "echo session > a.txt"], session=S, workspace=self.ws, layered=True)
        self.assertEqual(r.exit_code, 0, r.stderr)
        self.assertEqual(c.files.read(S, "a.txt"), b"session\n")
        c.files.write(S, "w.txt", b"from-api\n")
        c.files.remove(S, "gone.txt")
        r = c.exec(["/bin/sh", "-c", "read -r x < w.txt; echo $x; test -e gone.txt || echo gone"],
                   session=S, workspace=self.ws, layered=True)
        self.assertEqual(r.stdout, b"from-api\ngone\n", r.stderr)
        names = {e.name for e in c.files.list(S)}
        self.assertTrue({"a.txt", "w.txt"} <= names and "gone.txt" not in names, names)
        # The host is untouched before apply.
        self.assertFalse(os.path.exists(os.path.join(self.ws, "w.txt")))
        self.assertTrue(os.path.exists(os.path.join(self.ws, "gone.txt")))
        ch = {x.path: x.kind for x in c.changes(S)}
        self.assertEqual((ch.get("w.txt"), ch.get("gone.txt")), ("added", "deleted"), ch)
        res = c.apply(S)
        self.assertEqual(sorted(res.applied), ["a.txt", "gone.txt", "w.txt"], res)
        with open(os.path.join(self.ws, "w.txt")) as f:
            self.assertEqual(f.read(), "from-api\n")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "gone.txt")))
        c.discard(S)

    def test_discard_async(self):
        S = "pylay2"

        async def go():
            c = AsyncClient("unix:" + self.server.sock, approver=lambda r: True)
            r = await c.exec(["/bin/sh", "-c", "echo gone > gone.txt"], session=S, workspace=self.ws,
                             layered=True, spawn=True)
            self.assertEqual(r.exit_code, 0, r.stderr)
            self.assertEqual([x.path for x in await c.changes(S)], ["gone.txt"])
            await c.discard(S)
            with self.assertRaises(SandboxError) as e:
                await c.changes(S)
            self.assertEqual(e.exception.reason_code, "no_layer")
        asyncio.run(go())
        self.assertFalse(os.path.exists(os.path.join(self.ws, "gone.txt")))


if __name__ == "__main__":
    unittest.main()
