"""Session identity against a real `aleph-sandbox serve`: the node id and
the session incarnation in results, the incarnation remembered and sent
on every later call of the session, SessionMoved when the server does
not hold it, forget() dropping it, and the drain call."""

import asyncio
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import aleph_sandbox  # noqa: E402
from aleph_sandbox import AsyncClient, Client, SandboxError, SessionMoved  # noqa: E402
from test_client import Server, setUpModule  # noqa: E402,F401


class IdentityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--node-id", "py-node")
        cls.addr = "unix:" + cls.server.sock

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_node_id_and_incarnation(self):
        c = Client(self.addr)
        r = c.exec(["/bin/true"], session="id-1")
        self.assertEqual(r.node_id, "py-node")
        self.assertRegex(r.session_incarnation, r"^[0-9a-f]{32}$")
        self.assertEqual(c.incarnation("id-1"), r.session_incarnation)
        self.assertEqual(c.exec(["/bin/true"], session="id-1").session_incarnation, r.session_incarnation)
        self.assertEqual(c.capabilities()["node_id"], "py-node")

    def test_remembered_sent_and_raised(self):
        c = Client(self.addr)
        other = Client(self.addr)
        first = c.exec(["/bin/true"], session="moved-1").session_incarnation
        # What the client sends: the header and the body field.
        sent = {}
        post = c._post

        def spy(method, body, content_type, timeout, session=None):
            sent["headers"] = c._headers(content_type, session)
            sent["body"] = body
            return post(method, body, content_type, timeout, session)
        c._post = spy
        c.files.write("moved-1", "a.txt", b"x")
        self.assertEqual(sent["headers"].get(aleph_sandbox.INCARNATION_HEADER), first)
        self.assertIn(first.encode(), sent["body"])
        c._post = post

        # Another client forgets the session: this one's next call is
        # refused, nothing runs, no fresh workspace is made.
        other.forget("moved-1")
        with self.assertRaises(SessionMoved) as cm:
            c.exec(["/bin/sh", "-c", "echo ran > marker"], session="moved-1")
        e = cm.exception
        self.assertIsInstance(e, SandboxError)
        self.assertEqual((e.session, e.reason_code, e.code), ("moved-1", "session_moved", "failed_precondition"))
        with self.assertRaises(SessionMoved):
            c.files.list("moved-1")

        # The control: a client that does not track sessions gets a fresh
        # one (forget kept the workspace: the refused command wrote no
        # marker in it).
        loose = Client(self.addr, track_sessions=False)
        self.assertEqual(loose.incarnation("moved-1"), "")
        with self.assertRaises(SandboxError) as nf:
            loose.files.stat("moved-1", "marker")
        self.assertEqual(nf.exception.reason_code, "not_found")
        self.assertEqual(loose.files.read("moved-1", "a.txt"), b"x")
        fresh = loose.describe("moved-1")["incarnation"]
        self.assertNotEqual(fresh, first)
        with self.assertRaises(SessionMoved):
            c.exec(["/bin/true"], session="moved-1")

        # forget() through the client drops what it remembers.
        c.forget("moved-1")
        self.assertEqual(c.incarnation("moved-1"), "")
        again = c.exec(["/bin/true"], session="moved-1")
        self.assertFalse(again.denied)
        self.assertNotIn(again.session_incarnation, (first, fresh))
        self.assertEqual(c.incarnation("moved-1"), again.session_incarnation)

    def test_async_client(self):
        async def run():
            c = AsyncClient(self.addr)
            r = await c.exec(["/bin/true"], session="amoved-1")
            self.assertEqual(c.incarnation("amoved-1"), r.session_incarnation)
            Client(self.addr).forget("amoved-1")
            with self.assertRaises(SessionMoved) as cm:
                await c.exec(["/bin/true"], session="amoved-1")
            self.assertEqual(cm.exception.session, "amoved-1")
            await c.forget("amoved-1")
            r2 = await c.exec(["/bin/true"], session="amoved-1")
            self.assertNotEqual(r2.session_incarnation, r.session_incarnation)
            self.assertEqual((await c.capabilities())["node_id"], "py-node")
        asyncio.run(run())


class DrainTest(unittest.TestCase):
    def test_drain(self):
        server = Server()
        try:
            c = Client("unix:" + server.sock)
            c.exec(["/bin/true"], session="held")
            d = c.drain()
            self.assertTrue(d["started"])
            self.assertEqual(d["sessions"], 1)
            self.assertFalse(c.drain()["started"])
            with self.assertRaises(SandboxError) as cm:
                c.exec(["/bin/true"], session="new-one")
            self.assertEqual(cm.exception.reason_code, "draining")
            self.assertEqual(c.exec(["/bin/true"], session="held").exit_code, 0)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
