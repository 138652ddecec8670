"""The client over TCP (TLS, bearer tokens, mutual TLS) against a real
`aleph-sandbox serve` listening on 127.0.0.1, with certificates made for
the test by the openssl CLI; and the X-Aleph-Session header."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import aleph_sandbox  # noqa: E402
from aleph_sandbox import Client, SandboxError  # noqa: E402
from test_client import BIN, Server  # noqa: E402

TOKEN = "tok-" + "0123456789abcdef" * 2

_OPENSSL_CNF = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = aleph-test
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,digitalSignature
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
"""


class PKI:
    """Two CAs made by openssl: "ca" signed the server's certificate (for
    127.0.0.1) and a client certificate; "other" signed a client
    certificate the server must refuse. Each file is PKI.path(name)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="aleph-pki-")
        cnf = self.path("openssl.cnf")
        with open(cnf, "w") as f:
            f.write(_OPENSSL_CNF)
        for name, ext, ca in (("ca", "ca", None), ("other", "ca", None), ("server", "server", "ca"),
                              ("client", "client", "ca"), ("rogue", "client", "other")):
            argv = ["openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "1", "-subj", "/CN=aleph-test-" + name, "-config", cnf, "-extensions", ext,
                    "-keyout", self.path(name + ".key"), "-out", self.path(name + ".pem")]
            if ca:
                argv += ["-CA", self.path(ca + ".pem"), "-CAkey", self.path(ca + ".key")]
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for n in os.listdir(self.dir):
            os.chmod(self.path(n), 0o600)

    def path(self, name):
        return os.path.join(self.dir, name)

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def setUpModule():
    if shutil.which("bwrap") is None:
        raise unittest.SkipTest("bubblewrap (bwrap) is not installed: the client is tested against the real sandbox")
    if not os.access(os.path.join(BIN, "aleph-sandbox"), os.X_OK):
        raise RuntimeError("bin/aleph-sandbox is missing: run make build first")
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command makes the test's certificates: install it (scripts/setup.sh does)")


class _RemoteBase(unittest.TestCase):
    pki = None
    server = None

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()
        if cls.pki is not None:
            cls.pki.remove()

    def assert_ran(self, c, session, marker):
        """Runs a command that writes marker into the session's workspace
        and reads it back: what a refused call must not have done."""
        c.exec(["/bin/sh", "-c", "echo ran > " + marker], session=session, spawn=True)
        return c

    def marker_exists(self, session, name):
        ws = Client("unix:" + self.server.sock).describe(session).get("workspace", "")
        return bool(ws) and os.path.exists(os.path.join(ws, name))


class TokenTest(_RemoteBase):
    """A TCP listener with TLS and a tokens file."""

    @classmethod
    def setUpClass(cls):
        cls.pki = PKI()
        tokens = cls.pki.path("tokens")
        with open(tokens, "w") as f:
            f.write("# clients\n%s\n" % TOKEN)
        os.chmod(tokens, 0o600)
        cfg = "tokens_file = '%s'\n[serve.tls]\ncert = '%s'\nkey = '%s'\n" % (
            tokens, cls.pki.path("server.pem"), cls.pki.path("server.key"))
        cls.server = Server("--yes", config=cfg, tcp=True)

    def client(self, **kw):
        kw.setdefault("ca_file", self.pki.path("ca.pem"))
        return Client(self.server.tcp_addr, **kw)

    def test_exec_stream_and_processes_over_tcp(self):
        c = self.client(token=TOKEN)
        r = c.exec(["/bin/sh", "-c", "echo hi; echo err >&2; exit 3"], session="tcp1")
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.reason_code), (b"hi\n", b"err\n", 3, "allowed"))
        events = [(ev.kind, ev.data) for ev in c.stream(["/bin/sh", "-c", "echo a; echo b >&2"], session="tcp1")
                  if ev.kind != "exit"]
        self.assertEqual(sorted(events), [("stderr", b"b\n"), ("stdout", b"a\n")])
        p = c.start(["/bin/cat"], session="tcp1")
        p.write(b"round trip\n")
        out = b""
        while b"round trip\n" not in out and not p.exited:
            out += p.read(timeout=5.0)
        self.assertEqual(out, b"round trip\n")
        p.close_stdin()
        self.assertEqual(p.wait(timeout=30).exit_code, 0)
        self.assertEqual(c.check_policy("rm -rf /")["verdict"], "block")
        self.assertIn("tcp1", [s["session"] for s in c.sessions()])

    def test_token_from_environment(self):
        with mock.patch.dict(os.environ, {"ALEPH_SANDBOX_TOKEN": TOKEN}):
            c = self.client()
        self.assertEqual(c.exec(["/bin/echo", "env"], session="tcp-env").stdout, b"env\n")
        # An explicit token wins over the environment's.
        with mock.patch.dict(os.environ, {"ALEPH_SANDBOX_TOKEN": "wrong-token-0123456789"}):
            c = self.client(token=TOKEN)
        self.assertEqual(c.exec(["/bin/echo", "arg"], session="tcp-env").stdout, b"arg\n")

    def test_wrong_or_missing_token_refused(self):
        for name, token in (("missing", None), ("wrong", "wrong-token-0123456789")):
            with self.subTest(name), mock.patch.dict(os.environ, {}, clear=False):
                os.environ.pop("ALEPH_SANDBOX_TOKEN", None)
                marker = "refused-" + name
                with self.assertRaises(SandboxError) as cm:
                    self.assert_ran(self.client(token=token), "tcp-auth", marker)
                self.assertEqual(cm.exception.code, "unauthenticated", cm.exception)
                self.assertIn("token", cm.exception.message)
                self.assertFalse(self.marker_exists("tcp-auth", marker), "a refused call ran its command")
        # Control: the same command with the token runs and leaves its marker.
        self.assert_ran(self.client(token=TOKEN), "tcp-auth", "allowed")
        self.assertTrue(self.marker_exists("tcp-auth", "allowed"))

    def test_wrong_ca_refused(self):
        c = Client(self.server.tcp_addr, token=TOKEN, ca_file=self.pki.path("other.pem"))
        with self.assertRaises(SandboxError) as cm:
            c.exec(["/bin/true"], session="tcp-ca")
        self.assertEqual((cm.exception.code, cm.exception.reason_code), ("unavailable", "tls"), cm.exception)
        self.assertIn("ca_file", cm.exception.message)
        # Without ca_file the system's CAs are trusted: not this test CA.
        with self.assertRaises(SandboxError) as cm:
            Client(self.server.tcp_addr, token=TOKEN).exec(["/bin/true"], session="tcp-ca")
        self.assertEqual(cm.exception.reason_code, "tls")

    def test_unix_still_works(self):
        c = Client("unix:" + self.server.sock)
        self.assertEqual(c.exec(["/bin/echo", "local"], session="tcp-unix").stdout, b"local\n")
        # With the token exported for remote clients, unix is unaffected.
        with mock.patch.dict(os.environ, {"ALEPH_SANDBOX_TOKEN": TOKEN}):
            self.assertEqual(Client("unix:" + self.server.sock).exec(["/bin/echo", "x"], session="tcp-unix").stdout, b"x\n")


class MutualTLSTest(_RemoteBase):
    """A TCP listener that requires a client certificate of its CA."""

    @classmethod
    def setUpClass(cls):
        cls.pki = PKI()
        cfg = "[serve.tls]\ncert = '%s'\nkey = '%s'\nclient_ca = '%s'\n" % (
            cls.pki.path("server.pem"), cls.pki.path("server.key"), cls.pki.path("ca.pem"))
        cls.server = Server("--yes", config=cfg, tcp=True)

    def test_client_certificate(self):
        c = Client(self.server.tcp_addr, ca_file=self.pki.path("ca.pem"),
                   cert_file=self.pki.path("client.pem"), key_file=self.pki.path("client.key"))
        self.assertEqual(c.exec(["/bin/echo", "mtls"], session="mtls").stdout, b"mtls\n")
        self.assert_ran(c, "mtls", "allowed")
        self.assertTrue(self.marker_exists("mtls", "allowed"))

    def test_missing_or_foreign_certificate_refused(self):
        for name, cert in (("none", None), ("other CA", "rogue")):
            with self.subTest(name):
                kw = {}
                if cert:
                    kw = {"cert_file": self.pki.path(cert + ".pem"), "key_file": self.pki.path(cert + ".key")}
                c = Client(self.server.tcp_addr, ca_file=self.pki.path("ca.pem"), **kw)
                marker = "refused-" + (cert or "none")
                with self.assertRaises(SandboxError) as cm:
                    self.assert_ran(c, "mtls-refused", marker)
                self.assertEqual((cm.exception.code, cm.exception.reason_code), ("unavailable", "tls"), cm.exception)
                self.assertIn("cert_file", cm.exception.message)
        c = Client(self.server.tcp_addr, ca_file=self.pki.path("ca.pem"),
                   cert_file=self.pki.path("client.pem"), key_file=self.pki.path("client.key"))
        self.assert_ran(c, "mtls-refused", "allowed")
        self.assertTrue(self.marker_exists("mtls-refused", "allowed"))
        self.assertFalse(self.marker_exists("mtls-refused", "refused-none"))
        self.assertFalse(self.marker_exists("mtls-refused", "refused-rogue"))


class AddressTest(unittest.TestCase):
    """Bad addresses and options are refused when the client is made."""

    def test_refusals(self):
        for addr in ("tcp:", "tcp:host", "tcp:host:http", "tcp::7443", "tcp:host:70000", "http://host:1"):
            with self.subTest(addr), self.assertRaises(ValueError) as cm:
                Client(addr, token=TOKEN)
            self.assertIn("tcp:HOST:PORT", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            Client("unix:/tmp/x.sock", token=TOKEN)
        self.assertIn("tcp:", str(cm.exception))
        with self.assertRaises(ValueError):
            Client("tcp:127.0.0.1:7443", key_file="/nonexistent.key")
        with self.assertRaises(ValueError) as cm:
            Client("tcp:127.0.0.1:7443", ca_file="/nonexistent/ca.pem")
        self.assertIn("/nonexistent/ca.pem", str(cm.exception))
        with self.assertRaises(ValueError):
            Client("tcp:127.0.0.1:7443", token="two words 0123456789")
        with self.assertRaises(ValueError):
            Client("tcp:127.0.0.1:7443", token="line\r\nX-Injected: 1")
        c = Client("tcp:[::1]:7443")
        self.assertEqual((c.host, c.port, c.address), ("::1", 7443, "tcp:[::1]:7443"))
        with self.assertRaises(TypeError):
            c.server()


class SessionHeaderTest(unittest.TestCase):
    """Every call about a session carries it in X-Aleph-Session; serve
    refuses a header that disagrees with the body."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("--yes")
        cls.addr = "unix:" + cls.server.sock

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_header_disagreeing_with_body_refused(self):
        # A client that names another session in the header than in the
        # body: each call the service compares is refused, naming the
        # header, and nothing runs. That each is refused also shows the
        # header is sent on each (process calls included).
        good = Client(self.addr)
        p = good.start(["/bin/cat"], session="hdr")
        calls = {
            "exec": lambda c: c.exec(["/bin/sh", "-c", "echo ran > refused"], session="hdr", spawn=True),
            "start": lambda c: c.start(["/bin/true"], session="hdr"),
            "describe": lambda c: c.describe("hdr"),
            "grants": lambda c: c.grants("hdr"),
            "processes": lambda c: c.processes("hdr"),
            "write": lambda c: aleph_sandbox.Process(c, p.id, "hdr").write(b"x"),
            "read": lambda c: aleph_sandbox.Process(c, p.id, "hdr").read(timeout=0),
            "signal": lambda c: aleph_sandbox.Process(c, p.id, "hdr").signal("TERM"),
            "wait": lambda c: aleph_sandbox.Process(c, p.id, "hdr").wait(timeout=5),
        }
        with mock.patch.object(aleph_sandbox, "_session_header", lambda s: "not-" + s):
            bad = Client(self.addr)
            for name, call in calls.items():
                with self.subTest(name), self.assertRaises(SandboxError) as cm:
                    call(bad)
                self.assertEqual((cm.exception.code, cm.exception.field), ("invalid_argument", "X-Aleph-Session"),
                                 cm.exception)
                self.assertIn("not-hdr", cm.exception.message)
        # Controls: with the real header every call is served, and the
        # refused command left nothing.
        self.assertFalse(os.path.exists(os.path.join(good.describe("hdr")["workspace"], "refused")))
        for name, call in calls.items():
            if name not in ("signal", "wait"):
                with self.subTest("control " + name):
                    call(good)
        p.close_stdin()
        self.assertEqual(p.wait(timeout=30).exit_code, 0)

    def test_header_value(self):
        self.assertEqual(aleph_sandbox._session_header("s1"), "s1")
        self.assertEqual(aleph_sandbox._session_header("café 1"), "caf%C3%A9%201")
        # A session whose name is no plain header value still works.
        r = Client(self.addr).exec(["/bin/echo", "ok"], session="café 1\n%")
        self.assertEqual(r.stdout, b"ok\n")


if __name__ == "__main__":
    unittest.main()
