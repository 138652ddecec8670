"""Python client of the aleph-sandbox host service (``aleph-sandbox serve``).

Standard library only. It speaks the Connect protocol (JSON over HTTP/1.1)
to the service's unix socket, or over TLS to its TCP listener::

    from aleph_sandbox import Client, Denied, SandboxError
    c = Client()                 # ALEPH_SANDBOX_HOST, else the default socket
    c = Client("tcp:sandbox.example:7443", token="...", ca_file="ca.pem")  # remote
    r = c.exec(["/bin/echo", "hi"], session="s1")
    print(r.stdout, r.exit_code)

    ex = c.stream(["/bin/sh", "-c", "echo ready; read x"], session="s1", stdin_stream=True)
    for ev in ex:                # "stdout" / "stderr" events, then one "exit"
        if ev.data == b"ready\\n":
            ex.signal("TERM")    # or ex.write(b"x\\n"); ex.close_stdin()

docs/serve.md describes the service and the wire format.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import numbers
import os
import secrets as _secrets
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote as _quote

from ._layered import ApplyResult, Change, Refusal, _paths_msg

__all__ = [
    "Client",
    "Result",
    "Usage",
    "Violation",
    "Event",
    "Execution",
    "Process",
    "ApprovalRequest",
    "SandboxError",
    "Denied",
    "SessionMoved",
    "INCARNATION_HEADER",
    "default_address",
    "SESSION_HEADER",
    "TOKEN_ENV",
    "AsyncClient",
    "AsyncExecution",
    "AsyncProcess",
    "FileInfo",
    "Files",
    "AsyncFiles",
    "Change",
    "Refusal",
    "ApplyResult",
]

SERVICE = "aleph.host.v1.Service"

#: The header every call concerning a session carries (its value the
#: session, percent-encoded), so that a proxy can route by it; the service
#: refuses one that disagrees with the request's body.
SESSION_HEADER = "X-Aleph-Session"

#: The header carrying the session incarnation a call expects (beside the
#: request's expectIncarnation): a server that does not hold it refuses the
#: call with SessionMoved instead of making the session afresh.
INCARNATION_HEADER = "X-Aleph-Incarnation"

# The calls whose body carries expectIncarnation.
_EXPECT_METHODS = frozenset(("Execute", "StartProcess", "ReadFile", "WriteFile", "ListFiles", "StatFile", "RemoveFile"))

#: The environment variable a TCP client takes its bearer token from when
#: none is given.
TOKEN_ENV = "ALEPH_SANDBOX_TOKEN"

# The end-of-stream flag of a Connect streaming frame.
_END_STREAM = 0x02
_COMPRESSED = 0x01


class SandboxError(Exception):
    """The service could not run the command, or refused the request.

    ``code`` is the Connect status code ("invalid_argument", "unavailable",
    ...); ``reason_code``, ``rule`` and ``field`` come from the typed error
    detail, so callers match on them, never on the message.
    """

    def __init__(
        self,
        message: str,
        code: str = "unknown",
        reason_code: str = "",
        rule: str = "",
        field: str = "",
        hook: str = "",
        driver: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason_code = reason_code
        self.rule = rule
        self.field = field
        self.hook = hook
        self.driver = driver

    def __str__(self) -> str:
        return "%s: %s" % (self.code, self.message)


class SessionMoved(SandboxError):
    """The session's server is gone, or the session was forgotten and made
    again: the server that answered does not hold the incarnation this
    client saw (reason_code "session_moved"). Nothing ran. Its workspace,
    processes and grants are not there: start a new session (another
    name), or forget() this one to accept a fresh, empty one under the
    same name. ``session`` is the session's name."""

    def __init__(self, message: str, session: str = "", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.session = session


class Denied(SandboxError):
    """The pipeline decided not to run the command (raised by ``exec(...,
    check=True)``); ``result`` is the denial's Result."""

    def __init__(self, result: "Result") -> None:
        super().__init__(result.reason, code="permission_denied", reason_code=result.reason_code, rule=result.rule)
        self.result = result


@dataclass
class Violation:
    """One thing the sandbox refused a command: ``kind`` (``"spawn"``,
    ``"syscall"``, ``"network"`` or ``"filesystem"``), ``operation``
    (``"process_start"``, ``"syscall"``, ``"connect"``, ...), ``target`` (a
    syscall's name, ``host:port`` or a path) and how many times (``count``)."""

    kind: str = ""
    operation: str = ""
    target: str = ""
    count: int = 0

    @classmethod
    def _from_json(cls, m: Mapping[str, Any]) -> "Violation":
        # int64 arrives as a JSON string (the protobuf JSON mapping).
        return cls(kind=str(m.get("kind", "")), operation=str(m.get("operation", "")),
                   target=str(m.get("target", "")), count=int(m.get("count", 0)))


@dataclass
class Usage:
    """What a command consumed, as the sandbox measured it: CPU time (user
    plus system, and each) in milliseconds and the peak resident set size
    of its largest process in KiB. All 0 when it did not run."""

    cpu_ms: int = 0
    max_rss_kb: int = 0
    user_ms: int = 0
    system_ms: int = 0

    @classmethod
    def _from_json(cls, m: Optional[Mapping[str, Any]]) -> "Usage":
        m = m or {}
        # int64 arrives as a JSON string (the protobuf JSON mapping).
        return cls(cpu_ms=int(m.get("cpuMs", 0)), max_rss_kb=int(m.get("maxRssKb", 0)),
                   user_ms=int(m.get("userMs", 0)), system_ms=int(m.get("systemMs", 0)))


@dataclass
class Result:
    """How a command ended: the fields of ``aleph-sandbox exec --json``."""

    stdout: bytes = b""
    stderr: bytes = b""
    #: The command's exit status; None when it was denied (no process ran),
    #: so that ``r.exit_code == 0`` never reads a denial as success.
    exit_code: Optional[int] = None
    signal: int = 0
    timed_out: bool = False
    truncated: bool = False
    oom_killed: bool = False
    duration_ms: int = 0
    denied: bool = False
    reason: str = ""
    rule: str = ""
    reason_code: str = ""
    command_id: str = ""
    backend: str = ""
    profile_digest: str = ""
    verdicts: List[Dict[str, str]] = field(default_factory=list)
    #: How many times the sandbox refused the command a new process (it
    #: ran without ``spawn=True``); non-zero goes with reason_code
    #: "spawn_refused" and ``hint``.
    spawn_refused: int = 0
    #: One line saying how to get what was refused, in this client's terms
    #: (for spawn_refused: ``spawn=True``); "" when nothing was.
    hint: str = ""
    #: What the command consumed (``usage.cpu_ms``, ``usage.max_rss_kb``).
    usage: Usage = field(default_factory=Usage)
    #: What the sandbox refused the command (:class:`Violation` objects),
    #: at most the server's ``sandbox.max_violations``;
    #: ``violations_dropped`` counts the refusals past that bound.
    violations: List[Violation] = field(default_factory=list)
    violations_dropped: int = 0
    #: The kinds the sandbox watched for this command: an empty
    #: ``violations`` means nothing of these kinds was refused; of a kind
    #: not listed nothing is known.
    violation_kinds: List[str] = field(default_factory=list)
    #: The server that ran it (serve --node-id, else its hostname) and the
    #: session's incarnation there (new when the session is made again).
    node_id: str = ""
    session_incarnation: str = ""

    @classmethod
    def _from_json(cls, m: Mapping[str, Any]) -> "Result":
        reason_code = str(m.get("reasonCode", ""))
        return cls(
            stdout=_b64(m.get("stdout")),
            stderr=_b64(m.get("stderr")),
            exit_code=None if m.get("denied") else int(m.get("exitCode", 0)),
            signal=int(m.get("signal", 0)),
            timed_out=bool(m.get("timedOut", False)),
            truncated=bool(m.get("truncated", False)),
            oom_killed=bool(m.get("oomKilled", False)),
            duration_ms=int(m.get("durationMs", 0)),
            denied=bool(m.get("denied", False)),
            reason=str(m.get("reason", "")),
            rule=str(m.get("rule", "")),
            reason_code=reason_code,
            command_id=str(m.get("commandId", "")),
            backend=str(m.get("backend", "")),
            profile_digest=str(m.get("profileDigest", "")),
            verdicts=[dict(v) for v in m.get("verdicts", [])],
            # int64 arrives as a JSON string (the protobuf JSON mapping).
            spawn_refused=int(m.get("spawnRefused", 0)),
            hint=SPAWN_REFUSED_HINT if reason_code == "spawn_refused" else str(m.get("hint", "")),
            usage=Usage._from_json(m.get("usage")),
            violations=[Violation._from_json(v) for v in m.get("violations") or []],
            violations_dropped=int(m.get("violationsDropped", 0)),
            violation_kinds=[str(k) for k in m.get("violationKinds") or []],
            node_id=str(m.get("nodeId", "")),
            session_incarnation=str(m.get("sessionIncarnation", "")),
        )


#: Result.hint of a command refused a subprocess, in this client's terms.
SPAWN_REFUSED_HINT = ("the command tried to start a subprocess and the sandbox refused it: "
                      "run it with spawn=True")


def _final_result(m: Mapping[str, Any], stdout: List[bytes], stderr: List[bytes]) -> Result:
    """The Result of a stream's last message, given the chunks streamed before it.

    With ``outputStreamed`` the Result's output is the whole of it: the
    chunks, then the rest the service could not stream (normally none). A
    service that predates output_streamed repeated it all in the result.
    """
    r = Result._from_json(m)
    if m.get("outputStreamed"):
        r.stdout = b"".join(stdout) + r.stdout
        r.stderr = b"".join(stderr) + r.stderr
    return r


@dataclass
class ApprovalRequest:
    """A command asks for more than its session's baseline and grants."""

    id: str
    session: str
    command_id: str
    argv: List[str]
    summary: str
    requested: Dict[str, Any]
    baseline: Dict[str, Any]
    policy_digest: str

    @classmethod
    def _from_json(cls, m: Mapping[str, Any]) -> "ApprovalRequest":
        return cls(
            id=str(m.get("id", "")),
            session=str(m.get("session", "")),
            command_id=str(m.get("commandId", "")),
            argv=list(m.get("argv", [])),
            summary=str(m.get("summary", "")),
            requested=dict(m.get("requested", {})),
            baseline=dict(m.get("baseline", {})),
            policy_digest=str(m.get("policyDigest", "")),
        )


@dataclass
class Event:
    """One event of ``Client.stream``: kind is "stdout", "stderr" or "exit"."""

    kind: str
    data: bytes = b""
    result: Optional[Result] = None


Approver = Callable[[ApprovalRequest], bool]


def default_address() -> str:
    """$ALEPH_SANDBOX_HOST, else the socket ``serve`` listens on by default."""
    env = os.environ.get("ALEPH_SANDBOX_HOST")
    if env:
        return env
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run and os.path.isabs(run):
        return "unix:" + os.path.join(run, "aleph-sandbox", "aleph.sock")
    return "unix:" + os.path.join(os.path.expanduser("~"), ".local", "state", "aleph-sandbox", "aleph.sock")


def _session_header(session: str) -> str:
    """A session's header value: its UTF-8 percent-encoded outside the
    printable ASCII range (and '%'), so that any name is a valid header
    value and a plain one ("s1") is itself. The service decodes it."""
    return _quote(session, safe="!\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _parse_address(address: str) -> Tuple[str, str, int]:
    """("unix", path, 0) or ("tcp", host, port)."""
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        if not path:
            raise ValueError("the address unix: names no path: want unix:PATH")
        return "unix", path, 0
    if address.startswith("tcp:"):
        rest = address[len("tcp:"):]
        host, sep, port = rest.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # [::1]:7443
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("want tcp:HOST:PORT (e.g. tcp:sandbox.example:7443, tcp:[::1]:7443), got %r" % address)
        return "tcp", host, int(port)
    if ":" in address.split("/")[0]:
        raise ValueError("an address is unix:PATH or tcp:HOST:PORT, got %r" % address)
    return "unix", address, 0


def _token(token: Optional[str]) -> Optional[str]:
    """The bearer token: given, else $ALEPH_SANDBOX_TOKEN, else None."""
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
        if token is None:
            return None
        source = "$" + TOKEN_ENV
    else:
        source = "token"
    if not isinstance(token, str):
        raise TypeError("token is a string, got %r" % (type(token).__name__,))
    token = token.strip()
    # A token with a line break would write headers of its own.
    if not token or any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        raise ValueError("%s is not a bearer token: printable ASCII without spaces, as in the server's tokens_file" % source)
    return token


def _tls_context(ca_file: Optional[str], cert_file: Optional[str], key_file: Optional[str]) -> ssl.SSLContext:
    """TLS 1.2 or later, the server's certificate checked against ca_file
    (else the system's trusted CAs) and its name; cert_file and key_file,
    when given, are this client's certificate (mutual TLS)."""
    if key_file is not None and cert_file is None:
        raise ValueError("key_file is the key of cert_file: give cert_file too")
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError("ca_file %s: cannot be loaded as PEM certificates: %s" % (ca_file, e)) from e
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # The service answers Connect over HTTP/1.1 (gRPC takes HTTP/2).
    ctx.set_alpn_protocols(["http/1.1"])
    if cert_file is not None:
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as e:
            raise ValueError("cert_file %s / key_file %s: cannot be loaded as a PEM certificate and its key: %s"
                             % (cert_file, key_file, e)) from e
    return ctx


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix socket."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def _b64(v: Optional[str]) -> bytes:
    if not v:
        return b""
    return base64.b64decode(v + "=" * (-len(v) % 4))


def _varint(b: bytes, i: int) -> "tuple[int, int]":
    n = shift = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return n, i


def _error_detail(value: bytes) -> Dict[str, str]:
    """Decodes an aleph.host.v1.ErrorDetail (all its fields are strings)."""
    names = {1: "reason_code", 2: "rule", 3: "field", 4: "hook", 5: "driver"}
    out: Dict[str, str] = {}
    i = 0
    try:
        while i < len(value):
            key, i = _varint(value, i)
            if key & 7 != 2:
                break
            n, i = _varint(value, i)
            name = names.get(key >> 3)
            if name:
                out[name] = value[i : i + n].decode("utf-8", "replace")
            i += n
    except IndexError:
        pass
    return out


def _tls_error(address: str, e: ssl.SSLError) -> SandboxError:
    """A TLS failure: the server's certificate did not verify (wrong
    ca_file, or a name it does not cover), or the server refused this
    client's certificate (none, or one its client_ca did not sign)."""
    if isinstance(e, ssl.SSLCertVerificationError):
        hint = "the server's certificate did not verify: pass the CA that signed it as ca_file"
    else:
        hint = ("the TLS handshake failed: if the server asks for a client certificate (mutual TLS), "
                "pass cert_file and key_file signed by its client_ca")
    return SandboxError("%s: %s (%s)" % (address, hint, e), code="unavailable", reason_code="tls")


def _tls_refused(address: str, e: OSError) -> SandboxError:
    """A TLS connection closed before any answer. With TLS 1.3 the client's
    side of the handshake ends before the server has checked the client's
    certificate: a server that refuses it sends an alert and closes, and
    the client, already writing its request, may see only the broken pipe
    or the reset, the alert lost. Said as a TLS failure, since that is what
    it nearly always is."""
    return SandboxError("%s: the server closed the TLS connection before answering (%s): if it asks for a client "
                        "certificate (mutual TLS), pass cert_file and key_file signed by its client_ca"
                        % (address, e), code="unavailable", reason_code="tls")


def _error(obj: Mapping[str, Any], fallback_code: str = "unknown", session: Optional[str] = None) -> SandboxError:
    code = str(obj.get("code", fallback_code))
    message = str(obj.get("message", ""))
    detail: Dict[str, str] = {}
    for d in obj.get("details", []) or []:
        if d.get("type") == "aleph.host.v1.ErrorDetail":
            detail = _error_detail(_b64(d.get("value")))
            break
    if detail.get("reason_code") == "session_moved":
        return SessionMoved(message, session=session or "", code=code, **detail)
    return SandboxError(message, code=code, **detail)


def _incarnation_of(m: Mapping[str, Any]) -> str:
    """The session incarnation an answer names: its own, or its result's."""
    inc = m.get("sessionIncarnation")
    if not inc and isinstance(m.get("result"), Mapping):
        inc = m["result"].get("sessionIncarnation")
    return str(inc or "")


# The service's bound on timeout_seconds; beyond it a request is refused.
_MAX_TIMEOUT = 365 * 24 * 3600.0
_MAX_UINT64 = 2 ** 64 - 1
_MAX_INT64 = 2 ** 63 - 1


def _flag(name: str, v: Any) -> bool:
    """A boolean option: True or False, nothing merely truthy."""
    if not isinstance(v, bool):
        raise TypeError("%s is True or False, got %r" % (name, v))
    return v


def _seconds(name: str, v: Any, omit: str, maximum: float = _MAX_TIMEOUT) -> float:
    """A positive, finite number of seconds. omit says what leaving the
    option out (None) gives instead: on the wire 0 means "not given"."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError("%s is a number of seconds, got %r" % (name, v))
    f = float(v)
    if not (0 < f <= maximum):  # also refuses NaN
        raise ValueError("%s must be a positive number of seconds of at most %g, got %r; %s"
                         % (name, maximum, v, omit))
    return f


def _is_zero(v: Any) -> bool:
    """A number that is 0 (not False: a bool is refused as a number)."""
    return not isinstance(v, bool) and isinstance(v, numbers.Real) and v == 0


def _count(name: str, v: Any, unit: str, maximum: int, omit: str) -> int:
    """A positive whole number (of unit): 0 means "not given" on the wire."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("%s is a whole number of %s, got %r" % (name, unit, v))
    n = int(v)
    if not (0 < n <= maximum):
        raise ValueError("%s must be a positive number of %s (at most %d), got %r; %s" % (name, unit, maximum, v, omit))
    return n


def _size(rows: Any, cols: Any) -> "tuple[int, int]":
    """A terminal's rows and columns, 1 to 65535 each."""
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError("%s is a whole number, got %r" % (name, v))
        if not 1 <= int(v) <= 65535:
            raise ValueError("rows and cols lie between 1 and 65535, got %r x %r" % (rows, cols))
    return int(rows), int(cols)


def _paths(name: str, v: Any) -> List[str]:
    """A list of paths, made absolute; a lone string is refused (it would
    be read as a list of its characters)."""
    example = v if isinstance(v, str) else "/data"
    try:
        items = None if isinstance(v, (str, bytes)) else list(v)
    except TypeError:
        items = None
    if items is None or not all(isinstance(p, str) for p in items):
        raise TypeError("%s is a list of paths, e.g. [%r], got %r" % (name, example, v))
    return [os.path.abspath(p) for p in items]


def _strmap(name: str, v: Any) -> Dict[str, str]:
    """A mapping of strings to strings (env, secrets): anything else would
    reach the service as JSON it refuses, or as a value it never meant."""
    if not isinstance(v, Mapping):
        raise TypeError("%s is a mapping of names to strings, e.g. {'LANG': 'C.UTF-8'}, got %r" % (name, type(v).__name__))
    for k, val in v.items():
        if not isinstance(k, str) or not k:
            raise TypeError("%s: a name is a non-empty string, got %r" % (name, k))
        if not isinstance(val, str):
            raise TypeError("%s[%r] is a string, got %s %r; convert it with str() if that is what you mean"
                            % (name, k, type(val).__name__, val))
    return dict(v)


def _net(net: Any) -> Dict[str, Any]:
    """The request's network: a string is the CLI's syntax ("none", "all",
    or hosts joined by commas), sent as net for the service to read; a list
    of hosts travels as it is, one host an entry (net_hosts), instead of
    being joined into that syntax to be split again."""
    if isinstance(net, str):
        return {"net": net}
    try:
        items = None if isinstance(net, bytes) else list(net)
    except TypeError:
        items = None
    if items is None or not all(isinstance(h, str) for h in items):
        raise TypeError("net is \"none\", \"all\" or hosts: a string (\"a.example,b.example\") or a list of strings, got %r" % (net,))
    hosts = [h.strip() for h in items if h.strip()]
    if not hosts:
        return {"net": "none"}
    if len(hosts) == 1 and hosts[0].lower() in ("none", "all"):
        return {"net": hosts[0]}
    return {"netHosts": hosts}


_SIGNALS = ("TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2", "WINCH", "PIPE")


def _signal_name(name: Any) -> str:
    """A signal's name as the service takes it ("TERM"; "SIGTERM" and
    "term" are read as "TERM")."""
    if not isinstance(name, str):
        raise TypeError("a signal is named by a string, one of %s; got %r" % (", ".join(_SIGNALS), name))
    n = name.strip().upper()
    if n.startswith("SIG"):
        n = n[3:]
    if n not in _SIGNALS:
        raise ValueError("signal is one of %s, got %r" % (", ".join(_SIGNALS), name))
    return n


_HTTP_CODES = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "unimplemented",
               408: "deadline_exceeded", 409: "aborted", 429: "unavailable", 502: "unavailable",
               503: "unavailable", 504: "unavailable"}


class Client:
    """A connection to ``aleph-sandbox serve``.

    address is "unix:PATH" (or a bare path) or "tcp:HOST:PORT"; default:
    $ALEPH_SANDBOX_HOST, else the default socket. Over TCP the client
    speaks TLS (1.2 or later): ca_file is the PEM bundle the server's
    certificate is checked against (default: the system's trusted CAs),
    cert_file and key_file this client's certificate for a server that asks
    for one (mutual TLS), and token the bearer token for a server with a
    tokens_file (default: $ALEPH_SANDBOX_TOKEN). They are refused with a
    unix: address, whose server authenticates its peers by uid.

    track_sessions (default True): the client remembers the incarnation of
    each session from its first answer and sends it with every later call
    of that session, so that a session whose server went away (behind a
    router) raises SessionMoved instead of running in a fresh, empty
    workspace; forget() and delete() drop what it remembers.

    approver, when given, answers this client's own approval requests: it
    gets an ApprovalRequest and returns True to approve. Without one, the
    service's policy applies (denied unless it runs with --yes or another
    approver is connected). timeout bounds each call other than a
    command's run (seconds; 0, as for every timeout of this client and the
    service's requests, means "not given": the default, 30; None: no
    bound).
    """

    def __init__(self, address: Optional[str] = None, approver: Optional[Approver] = None,
                 timeout: Optional[float] = 30.0, token: Optional[str] = None, ca_file: Optional[str] = None,
                 cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 track_sessions: bool = True) -> None:
        address = address or default_address()
        self.track_sessions = _flag("track_sessions", track_sessions)
        # The incarnation of each session, from its first answer.
        self._incarnations: Dict[str, str] = {}
        self._inc_lock = threading.Lock()
        kind, where, port = _parse_address(address)
        #: The socket's path (unix), else "".
        self.path = where if kind == "unix" else ""
        #: The server's host and port (tcp), else "" and 0.
        self.host, self.port = (where, port) if kind == "tcp" else ("", 0)
        self._tls: Optional[ssl.SSLContext] = None
        self._token: Optional[str] = None
        if kind == "tcp":
            self._tls = _tls_context(ca_file, cert_file, key_file)
            self._token = _token(token)
        elif token is not None or ca_file is not None or cert_file is not None or key_file is not None:
            raise ValueError("token, ca_file, cert_file and key_file are for tcp: addresses; a unix socket's "
                             "server authenticates its peers by uid")
        self.approver = approver
        # 0 is "not given", as on the wire and in the TypeScript client:
        # the default. (A socket timeout of 0 would make every call
        # non-blocking.)
        if _is_zero(timeout):
            timeout = 30.0
        self.timeout = None if timeout is None else _seconds("timeout", timeout, "0 is the default (30); use None for no bound")

    @property
    def address(self) -> str:
        """unix:PATH or tcp:HOST:PORT."""
        if self.path:
            return "unix:" + self.path
        return "tcp:%s:%d" % ("[%s]" % self.host if ":" in self.host else self.host, self.port)

    def server(self) -> Dict[str, Any]:
        """Which serve answers on this client's socket: {"socket", "pid",
        "owner"}. pid is the listener's as the kernel reports it
        (SO_PEERCRED, Linux); owner is the line that serve wrote into the
        socket's lock file ("pid N, version V, data dir D"), given only
        when it names that same pid, else "". The default socket is shared
        by every checkout of a user: this says whether the serve that
        answers is the one you started. Unix sockets only."""
        if not self.path:
            raise TypeError("server() reads the peer of a unix socket; %s is a TCP address" % self.address)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5.0)
            s.connect(self.path)
            pid, _, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        except OSError as e:
            raise SandboxError("service socket %s: %s" % (self.path, e), code="unavailable") from e
        finally:
            s.close()
        owner = ""
        try:
            with open(self.path + ".lock", "rb") as f:
                line = " ".join(f.read(512).decode("utf-8", "replace").split())
            if line == "pid %d" % pid or line.startswith("pid %d," % pid):
                owner = line
        except OSError:
            pass
        return {"socket": self.path, "pid": pid, "owner": owner}

    # ---- transport ----

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._tls)
        return _UnixHTTPConnection(self.path, timeout)

    def _headers(self, content_type: str, session: Optional[str]) -> Dict[str, str]:
        headers = {"Content-Type": content_type, "Connect-Protocol-Version": "1", "Connection": "close"}
        if self._token is not None:
            headers["Authorization"] = "Bearer " + self._token
        if session:
            headers[SESSION_HEADER] = _session_header(session)
            inc = self.incarnation(session)
            if inc:
                headers[INCARNATION_HEADER] = inc
        return headers

    # ---- session incarnations ----

    def incarnation(self, session: str) -> str:
        """The incarnation of session this client saw first ("" for none,
        or with track_sessions=False)."""
        if not self.track_sessions:
            return ""
        with self._inc_lock:
            return self._incarnations.get(session, "")

    def _expect(self, method: str, msg: Mapping[str, Any], session: Optional[str]) -> Mapping[str, Any]:
        """msg with the incarnation expected of session in its body."""
        inc = self.incarnation(session) if session and method in _EXPECT_METHODS else ""
        if not inc or msg.get("expectIncarnation"):
            return msg
        out = dict(msg)
        out["expectIncarnation"] = inc
        return out

    def _learn(self, session: Optional[str], m: Mapping[str, Any]) -> None:
        """Remembers session's incarnation from its first answer naming one."""
        if not session or not self.track_sessions:
            return
        inc = _incarnation_of(m)
        if inc:
            with self._inc_lock:
                self._incarnations.setdefault(session, inc)

    def _drop(self, session: str) -> None:
        with self._inc_lock:
            self._incarnations.pop(session, None)

    def _post(self, method: str, body: bytes, content_type: str, timeout: Optional[float],
              session: Optional[str] = None) -> http.client.HTTPResponse:
        # One connection per call, closed with its response: a stream
        # holds its connection for as long as the command runs.
        conn = self._connection(timeout)
        try:
            conn.request("POST", "/%s/%s" % (SERVICE, method), body=body, headers=self._headers(content_type, session))
            return conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise SandboxError("no answer from the service within %ss" % timeout, code="deadline_exceeded") from e
        except ssl.SSLError as e:
            conn.close()
            raise _tls_error(self.address, e) from e
        except OSError as e:
            conn.close()
            if self._tls is not None and isinstance(e, (BrokenPipeError, ConnectionResetError)):
                raise _tls_refused(self.address, e) from e
            raise SandboxError("cannot reach the service at %s: %s" % (self.address, e), code="unavailable") from e
        finally:
            # The response keeps reading from the socket; the connection
            # object itself is no longer needed.
            conn.sock = None

    def _unary(self, method: str, msg: Mapping[str, Any], timeout: Union[float, None, str] = "default",
               session: Optional[str] = None) -> Dict[str, Any]:
        t = self.timeout if timeout == "default" else timeout
        msg = self._expect(method, msg, session)
        resp = self._post(method, json.dumps(msg).encode(), "application/json", t, session)  # type: ignore[arg-type]
        try:
            data = resp.read()
        except ssl.SSLError as e:
            raise _tls_error(self.address, e) from e
        finally:
            resp.close()
        if resp.status != 200:
            try:
                obj = json.loads(data)
            except ValueError:
                obj = {"message": data.decode("utf-8", "replace")}
            raise _error(obj, _HTTP_CODES.get(resp.status, "unknown"), session)
        out = json.loads(data) if data else {}
        self._learn(session, out)
        return out

    def _stream(self, method: str, msg: Mapping[str, Any], timeout: Optional[float],
                session: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        body = json.dumps(self._expect(method, msg, session)).encode()
        resp = self._post(method, struct.pack(">BI", 0, len(body)) + body, "application/connect+json", timeout, session)
        try:
            if resp.status != 200:
                data = resp.read()
                try:
                    obj = json.loads(data)
                except ValueError:
                    obj = {"message": data.decode("utf-8", "replace")}
                raise _error(obj, _HTTP_CODES.get(resp.status, "unknown"), session)
            while True:
                head = resp.read(5)
                if len(head) < 5:
                    raise SandboxError("the service closed the stream without its end", code="unavailable")
                flags, n = struct.unpack(">BI", head)
                payload = resp.read(n)
                if len(payload) < n:
                    raise SandboxError("the service closed the stream mid-message", code="unavailable")
                if flags & _COMPRESSED:
                    raise SandboxError("compressed frame, though none was asked for", code="internal")
                obj = json.loads(payload) if payload else {}
                if flags & _END_STREAM:
                    if obj.get("error"):
                        raise _error(obj["error"], session=session)
                    return
                self._learn(session, obj)
                yield obj
        except socket.timeout as e:
            raise SandboxError("no answer from the service within %ss" % timeout, code="deadline_exceeded") from e
        except ssl.SSLError as e:
            raise _tls_error(self.address, e) from e
        finally:
            resp.close()

    # ---- commands ----

    @staticmethod
    def _request(argv: Sequence[str], session: str = "default", workspace: Optional[str] = None,
                 cwd: Optional[str] = None, read: Sequence[str] = (), write: Sequence[str] = (),
                 net: Union[str, Sequence[str]] = "none", spawn: bool = False, memory_mb: Optional[int] = None,
                 timeout: Optional[float] = None, max_output: Optional[int] = None,
                 env: Optional[Mapping[str, str]] = None, stdin: Union[bytes, str, None] = None,
                 secrets: Optional[Mapping[str, str]] = None, layered: bool = False) -> Dict[str, Any]:
        items = None if isinstance(argv, (str, bytes)) else list(argv)
        if items is None or not all(isinstance(a, str) for a in items):
            raise TypeError("argv is a list of strings, e.g. ['/bin/sh', '-c', 'echo hi'], got %r" % (argv,))
        req: Dict[str, Any] = {"session": session, "argv": items, "spawn": _flag("spawn", spawn),
                               "read": _paths("read", read), "write": _paths("write", write)}
        req.update(_net(net))
        if workspace:
            req["workspace"] = os.path.abspath(workspace)
        if _flag("layered", layered):
            # The session's first command fixes whether it is layered.
            req["layered"] = True
        if cwd:
            req["cwd"] = cwd
        # On the wire 0 is "not given". memory_mb and max_output of 0 are
        # refused: "no memory" or "no output" cannot be what was meant. A
        # timeout of 0 is the service's default, as leaving it out is (and
        # as every timeout of this client): one meaning in both clients.
        if memory_mb is not None:
            req["memoryMb"] = str(_count("memory_mb", memory_mb, "MiB", _MAX_UINT64,
                                         "leave memory_mb out (None) for no memory limit of the command's own"))
        if timeout is not None and not _is_zero(timeout):
            req["timeoutSeconds"] = _seconds("timeout", timeout,
                                             "0 or leaving timeout out (None) is the service's default "
                                             "(sandbox.default_timeout_seconds; there is no unlimited timeout)")
        if max_output is not None:
            req["maxOutput"] = str(_count("max_output", max_output, "bytes", _MAX_INT64,
                                          "leave max_output out (None) for the configured budget (sandbox.max_output_bytes)"))
        if env is not None and (env or not isinstance(env, Mapping)):
            req["env"] = _strmap("env", env)
        if secrets is not None and (secrets or not isinstance(secrets, Mapping)):
            req["secrets"] = _strmap("secrets", secrets)
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
            req["stdin"] = base64.b64encode(data).decode()
        return req

    def _events(self, ex: "_CallState", req: Dict[str, Any], read_timeout: Optional[float]) -> Iterator[Event]:
        ex.sent = True
        try:
            for msg in self._stream("Execute", req, read_timeout, session=req["session"]):
                # Any message means the service has the call: its key is
                # registered before the command's first output.
                ex.running = True
                if "output" in msg:
                    out = msg["output"]
                    kind = "stderr" if out.get("stream") == "STREAM_STDERR" else "stdout"
                    data = _b64(out.get("data"))
                    (ex.stderr if kind == "stderr" else ex.stdout).append(data)
                    yield Event(kind=kind, data=data)
                elif "approvalRequest" in msg:
                    if self.approver is not None:
                        # Answered from another thread: the stream must keep
                        # being read meanwhile.
                        threading.Thread(target=self._answer, args=(ApprovalRequest._from_json(msg["approvalRequest"]),),
                                         daemon=True).start()
                elif "result" in msg:
                    ex.result = _final_result(msg["result"], ex.stdout, ex.stderr)
                    ex.stdout, ex.stderr = [], []
                    yield Event(kind="exit", result=ex.result)
        except Exception as e:
            ex.failure = e
            raise
        finally:
            ex.ended = True

    def _answer(self, req: ApprovalRequest) -> None:
        assert self.approver is not None
        try:
            ok = bool(self.approver(req))
        except Exception:  # an approver that fails does not approve
            ok = False
        try:
            self._unary("Approve", {"id": req.id, "approved": ok}, session=req.session)
        except SandboxError:
            pass  # timed out or answered elsewhere meanwhile: the command says so

    def stream(self, argv: Sequence[str], stdin_stream: bool = False, **kwargs: Any) -> "Execution":
        """Runs argv and returns its Execution: iterating it yields the
        output as it arrives (Events of kind "stdout" and "stderr": each
        stream's bytes in the order the command wrote them, with no order
        between the two, which are separate pipes) and then one Event of
        kind "exit" with the Result. While it runs, Execution.signal sends
        it a signal; with stdin_stream=True its stdin is a stream fed by
        Execution.write and ended by Execution.close_stdin (and it then has
        no default timeout, only the service's maximum lifetime). Nothing is
        sent before the iteration begins. Keyword arguments are those of
        exec (without check; stdin is refused with stdin_stream)."""
        if _flag("stdin_stream", stdin_stream) and kwargs.get("stdin") is not None:
            raise TypeError("stdin is either one buffer up front (stdin=) or a stream (stdin_stream=True), not both")
        req = self._request(argv, **kwargs)
        # Always set, as `exec --host` does: the key only reaches this
        # command, and only while it runs.
        req["signalKey"] = "sig-" + _secrets.token_hex(16)
        if stdin_stream:
            req["stdinStream"] = True
        if self.approver is not None:
            req["answerApprovals"] = True
        limit = req.get("timeoutSeconds")
        # The command's own limit bounds the wait, plus slack for set-up.
        read_timeout = None if limit is None else limit + 30.0
        return Execution(self, req, read_timeout)

    def exec(self, argv: Sequence[str], check: bool = False, **kwargs: Any) -> Result:
        """Runs argv and returns its Result. A denial is a Result with
        denied=True (check=True raises Denied instead); a failure of the
        sandbox raises SandboxError. It is ``stream(argv, **kwargs).wait()``:
        to signal the command while it runs, or to stream its stdin, use
        stream.

        Keyword arguments mirror ``aleph-sandbox exec``: session, workspace,
        cwd, read, write (lists of paths), net ("none", "all", or hosts),
        spawn (a bool), memory_mb (MiB), timeout (seconds), max_output
        (bytes), env, stdin, secrets. timeout=0, like leaving it out, is the
        service's default (sandbox.default_timeout_seconds): on the wire 0
        means "not given". memory_mb and max_output are positive when given
        (a 0 is refused, ValueError, rather than silently run with the
        default); leave one out (None) for the default. A value of the wrong
        type (a string, a bool, a fraction of a byte) is a TypeError.
        """
        _flag("check", check)
        if kwargs.get("stdin_stream") is not None:
            raise TypeError("exec returns at the end, so nothing could write to a streamed stdin: use stream(..., stdin_stream=True)")
        return self.stream(argv, **kwargs).wait(check=check)

    def start(self, argv: Sequence[str], tty: bool = False, rows: Optional[int] = None, cols: Optional[int] = None,
              **kwargs: Any) -> "Process":
        """Starts argv as a process that outlives this call (within its
        session: forgetting the session, or the service stopping, kills it).
        It has no timeout unless one is given (the service's maximum lifetime
        bounds it). Its stdin comes from Process.write; keyword arguments
        are those of exec except stdin. tty=True gives it a terminal of rows
        x cols (default 24 x 80); rows and cols without tty are refused."""
        if kwargs.get("stdin") is not None:
            raise TypeError("a process's stdin comes from Process.write")
        req: Dict[str, Any] = {"command": self._request(argv, **kwargs)}
        if _flag("tty", tty):
            r, c = _size(24 if rows is None else rows, 80 if cols is None else cols)
            req.update({"tty": True, "rows": r, "cols": c})
        elif rows is not None or cols is not None:
            raise TypeError("rows and cols are a terminal's size: pass tty=True with them")
        session = req["command"]["session"]
        if self.approver is not None:
            # The process asks after this call has returned (it starts in
            # the background): its requests go to this client's approver
            # through an Approvals stream of its own key, which the
            # service ends once the process is past its approval.
            key = "apr-" + _secrets.token_hex(16)
            req["approvalKey"] = key
            threading.Thread(target=self._serve_approvals, args=(key, session), daemon=True).start()
        r = self._unary("StartProcess", req, session=session)
        return Process(self, str(r.get("id", "")), session)

    def _serve_approvals(self, key: str, session: str) -> None:
        try:
            # With the process's session in the header: a proxy that routes
            # by session sends the stream to the server running the process.
            for msg in self._stream("Approvals", {"key": key}, None, session=session):
                self._answer(ApprovalRequest._from_json(msg))
        except SandboxError:
            pass  # the service went away: the process is denied and says so

    def processes(self, session: str = "") -> List[Dict[str, Any]]:
        """The processes of a session ("" for every session's): dicts with
        id, session, program, startedUnixMs (an int: milliseconds since the
        epoch), exited and exitCode (an int). The protobuf JSON mapping
        sends 64-bit integers as strings; they are numbers here, as in the
        TypeScript client."""
        out = []
        for p in self._unary("ListProcesses", {"session": session}, session=session or None).get("processes", []):
            p = dict(p)
            p["startedUnixMs"] = int(p.get("startedUnixMs") or 0)
            p["exitCode"] = int(p.get("exitCode") or 0)
            p["exited"] = bool(p.get("exited", False))
            out.append(p)
        return out

    # ---- approvals, sessions, grants ----

    def approve(self, request_id: str, approved: bool, session: Optional[str] = None) -> None:
        """Answers an approval request (from approvals() or a command's
        own). session, the request's (req.session), is sent as the
        X-Aleph-Session header for proxies that route by session."""
        self._unary("Approve", {"id": request_id, "approved": bool(approved)}, session=session)

    def approvals(self) -> Iterator[ApprovalRequest]:
        """Approval requests of commands whose clients do not answer their
        own, until the service stops; answer each with approve()."""
        for msg in self._stream("Approvals", {}, None):
            yield ApprovalRequest._from_json(msg)

    def sessions(self) -> List[Dict[str, Any]]:
        """The sessions the service holds, and those kept on disk from before
        it started (their workspace and the record naming it, or their
        grants): those have ``persistedOnly`` true."""
        return list(self._unary("Sessions", {"list": {}}).get("sessions", []))

    def describe(self, session: str) -> Dict[str, Any]:
        s = self._unary("Sessions", {"describe": {"session": session}}, session=session).get("sessions", [])
        return dict(s[0]) if s else {}

    def forget(self, session: str) -> None:
        """Forgets a session (its processes and commands end, its grants
        go; its workspace stays). The incarnation this client remembers of
        it goes too: its next call makes it afresh."""
        self._drop(session)
        self._unary("Sessions", {"forget": {"session": session}}, session=session)

    def delete(self, session: str) -> None:
        """Deletes a session: its processes and commands end, its private
        HOME, kept grants and the workspace the service made for it are
        removed (a workspace you named stays). forget() keeps the
        workspace."""
        self._drop(session)
        self._unary("Sessions", {"delete": {"session": session}}, session=session)

    def grants(self, session: str) -> Dict[str, Any]:
        return self._unary("Grants", {"list": {"session": session}}, session=session)

    # ---- layered sessions (exec(..., layered=True)) ----

    def changes(self, session: str) -> List[Change]:
        """What the layered session changed over its workspace, sorted by
        path: objects with ``.path`` and ``.kind``."""
        r = self._unary("Changes", _paths_msg(session, None), session=session)
        return [Change._from_json(c) for c in r.get("changes", [])]

    def diff(self, session: str, paths: Optional[Sequence[str]] = None) -> str:
        """A unified diff of the layered session's text changes (binary
        files named), all or those at or below ``paths``."""
        return str(self._unary("Diff", _paths_msg(session, paths), session=session).get("diff", ""))

    def apply(self, session: str, paths: Optional[Sequence[str]] = None, allow_large: bool = False) -> ApplyResult:
        """Brings the layered session's changes (all, or those at or below
        ``paths``) to the host. What must never reach the host (protected
        entries, hooks and config of .git, repositories, set-id files,
        devices, links out...) is refused, each in ``.refused`` with its
        reason; a host file changed since the session read it is in
        ``.conflicts``, the host's version kept."""
        msg = _paths_msg(session, paths)
        if _flag("allow_large", allow_large):
            msg["allowLarge"] = True
        return ApplyResult._from_json(self._unary("Apply", msg, session=session))

    def discard(self, session: str) -> None:
        """Drops the layered session's layer; the host never saw it."""
        self._unary("Discard", _paths_msg(session, None), session=session)

    def revoke(self, session: str, grant_id: str) -> Dict[str, Any]:
        return self._unary("Grants", {"revoke": {"session": session, "grantId": grant_id}}, session=session)

    def apply_network_grant(self, session: str, host: str, port: int, expected_digest: str) -> Dict[str, Any]:
        return self._unary("Grants", {"applyNetwork": {"session": session, "host": host, "port": int(port),
                                                       "expectedDigest": expected_digest}}, session=session)

    def capabilities(self) -> Dict[str, Any]:
        """The driver's capability report, as ``doctor`` shows it, with the
        server's node id as "node_id"."""
        r = self._unary("Capabilities", {})
        report = json.loads(r.get("reportJson", "{}"))
        report["node_id"] = str(r.get("nodeId", ""))
        return report

    def drain(self) -> Dict[str, Any]:
        """Makes the server drain (as on SIGTERM, without stopping): not
        ready, new sessions refused (reason_code "draining"), the sessions
        it holds still served. Returns {"node_id", "started", "sessions",
        "running_commands", "running_processes"}."""
        r = self._unary("Drain", {})
        return {"node_id": str(r.get("nodeId", "")), "started": bool(r.get("started", False)),
                "sessions": int(r.get("sessions", 0)), "running_commands": int(r.get("runningCommands", 0)),
                "running_processes": int(r.get("runningProcesses", 0))}

    @property
    def files(self) -> "Files":
        """The files API of sessions' workspaces: ``files.write(S, path,
        data)``, ``files.read(S, path)``, ``files.list(S)``,
        ``files.stat(S, path)``, ``files.remove(S, path)``."""
        return Files(self)

    def check_policy(self, command: str) -> Dict[str, str]:
        """``policy check``: {"verdict": "allow"|"warn"|"block", "rule", "reason"}."""
        r = self._unary("CheckPolicy", {"command": command})
        return {"verdict": r.get("verdict", ""), "rule": r.get("rule", ""), "reason": r.get("reason", "")}


# The most one WriteStdin carries (the service's limit).
_STDIN_CHUNK = 1 << 20


class _CallState:
    """What an Execution and its stream's generator share. The generator
    holds this, not the Execution: without a cycle, dropping the Execution
    closes the call at once."""

    def __init__(self) -> None:
        self.sent = False      # the request is on its way
        self.running = False   # a message came: the service has the call
        self.ended = False     # the stream is over
        self.closed = False    # closed by the client before the result
        self.result: Optional[Result] = None
        self.failure: Optional[BaseException] = None
        # The output as it came: the service sends each byte once, as a
        # chunk, and its result carries only what it could not stream.
        self.stdout: List[bytes] = []
        self.stderr: List[bytes] = []


class Execution:
    """A command run by Client.stream. Iterate it for its Events (the
    output as it arrives, then one of kind "exit"); wait() reads to the end
    and returns the Result. signal(), write() and close_stdin() reach the
    command while it runs, from the iterating thread or any other.

    Nothing is sent before the iteration (or wait) begins. Leaving the
    iteration early does not end the command: close() does (or a ``with``
    block around it), and so does dropping the Execution; the service then
    kills the command's process tree.
    """

    def __init__(self, client: Client, req: Dict[str, Any], read_timeout: Optional[float]) -> None:
        self.client = client
        #: The key naming this command to Signal, WriteStdin and CloseStdin.
        self.signal_key: str = req["signalKey"]
        #: The command's session (sent with every call about it).
        self.session: str = req["session"]
        self._stdin_stream = bool(req.get("stdinStream"))
        self._state = _CallState()
        self._events = client._events(self._state, req, read_timeout)

    @property
    def result(self) -> Optional[Result]:
        """The Result, once the "exit" event has come."""
        return self._state.result

    def __iter__(self) -> "Execution":
        return self

    def __next__(self) -> Event:
        return next(self._events)

    def __enter__(self) -> "Execution":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the call; a command still running is killed."""
        self._events.close()
        if self._state.result is None and self._state.sent:
            self._state.closed = True

    def wait(self, check: bool = False) -> Result:
        """Reads the rest of the stream and returns the Result (check=True
        raises Denied for a denial); the output not yet iterated is in the
        Result's stdout and stderr, within the output budget."""
        _flag("check", check)
        for _ in self:
            pass
        if self.result is None:
            if self._state.failure is not None:
                raise self._state.failure
            if self._state.closed:
                raise SandboxError("the call was closed before the command ended", code="canceled")
            raise SandboxError("the service ended the stream without a result", code="internal")
        if check and self.result.denied:
            raise Denied(self.result)
        return self.result

    def _call(self, method: str, msg: Dict[str, Any], timeout: Union[float, None, str] = "default") -> Dict[str, Any]:
        """A call naming this command by its key. Until the first message
        the service may not have the call yet: NotFound is tried again
        (for at most the client's timeout), as `exec --host` does; after it,
        NotFound means the command has ended."""
        st = self._state
        if not st.sent:
            raise SandboxError("the command has not been sent yet: iterate the stream (or call wait) first",
                               code="not_found", reason_code="not_running", field="signal_key")
        deadline = None if self.client.timeout is None else time.monotonic() + self.client.timeout
        pause = 0.005
        while True:
            if st.ended:
                raise SandboxError("the command has ended", code="not_found", reason_code="not_running", field="signal_key")
            running = st.running
            try:
                return self.client._unary(method, msg, timeout, session=self.session)
            except SandboxError as e:
                if e.code != "not_found" or running:
                    raise
                if deadline is not None and time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(2 * pause, 0.1)

    def signal(self, name: str) -> None:
        """Sends the running command a signal: "TERM", "INT", "HUP",
        "QUIT", "KILL", "USR1", "USR2", "WINCH" or "PIPE". The command
        decides what it means (a shell trap runs; unhandled, TERM ends it
        with signal 15). Before the command is handed to the sandbox (during
        its hooks or approval), any signal but WINCH and PIPE stops it:
        nothing runs. SandboxError reason_code "not_running" once it has
        ended."""
        self._call("Signal", {"signalKey": self.signal_key, "signal": _signal_name(name)})

    def write(self, data: Union[bytes, str]) -> int:
        """Writes to the command's streamed stdin (stream(...,
        stdin_stream=True)); returns the bytes taken, fewer only when the
        command ended or closed its stdin meanwhile. Waits while the service
        holds as much unread input as it keeps (64 KiB): the command's pace
        bounds the writer's."""
        if not self._stdin_stream:
            raise TypeError("this command's stdin is not a stream: pass stdin_stream=True to stream()")
        if not isinstance(data, (bytes, bytearray, memoryview, str)):
            raise TypeError("data is bytes or str, got %r" % (type(data).__name__,))
        b = data.encode() if isinstance(data, str) else bytes(data)
        written = 0
        for i in range(0, len(b), _STDIN_CHUNK):
            piece = b[i:i + _STDIN_CHUNK]
            r = self._call("WriteStdin", {"signalKey": self.signal_key, "data": base64.b64encode(piece).decode()}, None)
            n = int(r.get("written", 0))
            written += n
            if n < len(piece):
                break
        return written

    def close_stdin(self) -> None:
        """Ends the streamed stdin: the command reads EOF after what was
        written."""
        if not self._stdin_stream:
            raise TypeError("this command's stdin is not a stream: pass stdin_stream=True to stream()")
        self._call("CloseStdin", {"signalKey": self.signal_key})


class Process:
    """A process started by Client.start. read() follows its output (stdout
    and stderr merged as the service reads them: each stream's bytes in
    order, no order between the two, which are separate pipes; one stream
    on a terminal) from where the last read ended; the
    service keeps the last 1 MiB of it, and ``dropped`` counts what a slow
    reader lost."""

    def __init__(self, client: Client, id: str, session: Optional[str] = None) -> None:
        self.client = client
        self.id = id
        #: The process's session, sent with every call about it (as the
        #: X-Aleph-Session header, for proxies that route by session);
        #: None for a process attached to by its id alone.
        self.session = session
        self.offset = 0
        self.dropped = 0
        self.exited = False
        self.result: Optional[Result] = None

    def write(self, data: Union[bytes, str]) -> int:
        """Writes to the process's stdin (waits while its pipe is full)."""
        b = data.encode() if isinstance(data, str) else bytes(data)
        r = self.client._unary("WriteProcess", {"id": self.id, "data": base64.b64encode(b).decode()}, None, session=self.session)
        return int(r.get("written", 0))

    def close_stdin(self) -> None:
        """Ends the stdin: the process reads EOF after what was written."""
        self.client._unary("CloseProcessStdin", {"id": self.id}, session=self.session)

    def read(self, timeout: float = 1.0) -> bytes:
        """The output since the last read, waiting up to timeout seconds
        when there is none yet; b"" when none came (or the process ended:
        see ``exited``)."""
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
            raise TypeError("timeout is a number of seconds, got %r" % (timeout,))
        if not 0 <= float(timeout) < math.inf:  # also refuses NaN
            raise ValueError("timeout is a finite number of seconds >= 0 (the service waits at most 60), got %r" % (timeout,))
        wait = float(timeout)
        r = self.client._unary("ReadProcess", {"id": self.id, "offset": str(self.offset), "waitSeconds": wait},
                               wait + 30.0, session=self.session)
        self.offset = int(r.get("nextOffset", self.offset))
        self.dropped += int(r.get("dropped", 0))
        if r.get("exited"):
            self.exited = True
            if "result" in r:
                self.result = Result._from_json(r["result"])
        return _b64(r.get("data"))

    def resize(self, rows: int, cols: int) -> None:
        """Sets the window size of a process started with tty=True."""
        r, c = _size(rows, cols)
        self.client._unary("ResizeProcess", {"id": self.id, "rows": r, "cols": c}, session=self.session)

    def signal(self, name: str) -> None:
        """Sends a signal: "TERM", "INT", "HUP", "QUIT", "KILL", "USR1",
        "USR2", "WINCH" or "PIPE"."""
        self.client._unary("SignalProcess", {"id": self.id, "signal": _signal_name(name)}, session=self.session)

    def wait(self, timeout: Optional[float] = None) -> Result:
        """Waits for the end and returns the Result (its stdout and stderr
        are the output the pipeline kept; read() gives the rest). The
        process is then gone from the service. timeout: seconds; None or 0
        (the default): no bound."""
        if _is_zero(timeout):
            timeout = None
        if timeout is not None:
            timeout = _seconds("timeout", timeout, "None or 0 for no bound")
        r = self.client._unary("WaitProcess", {"id": self.id}, timeout, session=self.session)
        self.exited = True
        self.result = Result._from_json(r.get("result", {}))
        return self.result


# The asyncio client builds on the definitions above.
from ._aio import AsyncClient, AsyncExecution, AsyncProcess  # noqa: E402
from ._files import AsyncFiles, FileInfo, Files  # noqa: E402
