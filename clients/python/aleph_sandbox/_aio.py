"""The asyncio client: ``aleph_sandbox.AsyncClient``.

The same methods as ``Client``, as coroutines, and ``async for`` over
streams; standard library only (asyncio streams speaking the same Connect
protocol over HTTP/1.1, on the unix socket or over TLS). Every call has its
own connection, closed with its answer, as in the synchronous client:
closing a command's connection is what cancels it.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import math
import numbers
import secrets as _secrets
import ssl
import struct
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Set, Union

from ._layered import ApplyResult, Change, _paths_msg
from . import (_COMPRESSED, _END_STREAM, _HTTP_CODES, _STDIN_CHUNK, SERVICE, ApprovalRequest, Client, Denied, Event,
               Result, SandboxError, _error, _flag, _is_zero, _seconds, _signal_name, _size, _tls_error, _tls_refused,
               _b64, _final_result)

#: An approver of the asyncio client: a function, or a coroutine function,
#: of an ApprovalRequest, true to approve.
AsyncApprover = Callable[[ApprovalRequest], Union[bool, Awaitable[bool]]]

# The longest status line or header line read from the service.
_MAX_LINE = 64 << 10


class _Response:
    """The answer to one call: status, headers, and the body read as it
    comes (chunked, by length, or to the end of the connection)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, idle: Optional[float],
                 address: str, tls: bool) -> None:
        self.tls = tls
        self.reader = reader
        self.writer = writer
        self.idle = idle
        self.address = address
        self.status = 0
        self.headers: Dict[str, str] = {}
        self._left: Optional[int] = None  # bytes left of a length-delimited body
        self._chunked = False
        self._chunk_left = 0
        self._done = False

    async def _wait(self, aw: Awaitable[Any]) -> Any:
        try:
            if self.idle is None:
                return await aw
            return await asyncio.wait_for(aw, self.idle)
        except asyncio.TimeoutError as e:
            raise SandboxError("no answer from the service within %ss" % self.idle, code="deadline_exceeded") from e
        except ssl.SSLError as e:
            raise _tls_error(self.address, e) from e
        except (BrokenPipeError, ConnectionResetError, asyncio.IncompleteReadError) as e:
            if self.tls and self.status == 0:
                raise _tls_refused(self.address, e) from e  # before any answer: see _tls_refused
            raise SandboxError("the connection to the service at %s failed: %s" % (self.address, e),
                               code="unavailable") from e
        except (ConnectionError, OSError) as e:
            raise SandboxError("the connection to the service at %s failed: %s" % (self.address, e),
                               code="unavailable") from e

    async def _line(self) -> bytes:
        line = await self._wait(self.reader.readuntil(b"\n"))
        if len(line) > _MAX_LINE:
            raise SandboxError("an answer's header line is too long", code="internal")
        return line.rstrip(b"\r\n")

    async def read_head(self) -> None:
        status = await self._line()
        parts = status.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise SandboxError("not an HTTP answer from %s: %r" % (self.address, status[:80]), code="unavailable")
        self.status = int(parts[1])
        while True:
            line = await self._line()
            if not line:
                break
            k, _, v = line.decode("latin-1").partition(":")
            self.headers[k.strip().lower()] = v.strip()
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            self._chunked = True
        elif "content-length" in self.headers:
            self._left = int(self.headers["content-length"])

    async def chunk(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        if self._done:
            return b""
        if self._chunked:
            if self._chunk_left == 0:
                size = await self._line()
                n = int(size.split(b";", 1)[0].strip() or b"0", 16)
                if n == 0:
                    while await self._line():  # trailers
                        pass
                    self._done = True
                    return b""
                self._chunk_left = n
            data = await self._wait(self.reader.read(min(self._chunk_left, 1 << 16)))
            if not data:
                raise SandboxError("the service closed the connection mid-answer", code="unavailable")
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                await self._line()  # the CRLF after a chunk
            return data
        if self._left is not None:
            if self._left == 0:
                self._done = True
                return b""
            data = await self._wait(self.reader.read(min(self._left, 1 << 16)))
            if not data:
                raise SandboxError("the service closed the connection mid-answer", code="unavailable")
            self._left -= len(data)
            return data
        data = await self._wait(self.reader.read(1 << 16))
        if not data:
            self._done = True
        return data

    async def read_all(self) -> bytes:
        out = []
        while True:
            c = await self.chunk()
            if not c:
                return b"".join(out)
            out.append(c)

    def close(self) -> None:
        self.writer.close()


class AsyncClient:
    """``Client``'s asyncio twin: the same arguments, the same methods as
    coroutines (``await c.exec(...)``), ``async for`` over ``stream()`` and
    ``approvals()``. approver may be a function or a coroutine function; a
    plain function runs in the loop's default executor, so one that blocks
    (a prompt) does not stall other calls."""

    def __init__(self, address: Optional[str] = None, approver: Optional[AsyncApprover] = None,
                 timeout: Optional[float] = 30.0, token: Optional[str] = None, ca_file: Optional[str] = None,
                 cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 track_sessions: bool = True) -> None:
        # The synchronous client checks the arguments, builds requests and
        # remembers the sessions' incarnations: both clients take the same
        # options with the same meaning.
        self._c = Client(address, None, timeout, token, ca_file, cert_file, key_file, track_sessions)
        self.approver = approver
        self.timeout = self._c.timeout
        # Approval answers in flight: kept so that they are not collected
        # before they run.
        self._tasks: Set["asyncio.Task[None]"] = set()

    @property
    def address(self) -> str:
        return self._c.address

    # ---- transport ----

    async def _open(self, method: str, body: bytes, content_type: str, idle: Optional[float],
                    session: Optional[str]) -> _Response:
        c = self._c
        try:
            if c._tls is not None:
                conn = asyncio.open_connection(c.host, c.port, ssl=c._tls, server_hostname=c.host, limit=_MAX_LINE)
            else:
                conn = asyncio.open_unix_connection(c.path, limit=_MAX_LINE)
            reader, writer = await (conn if idle is None else asyncio.wait_for(conn, idle))
        except asyncio.TimeoutError as e:
            raise SandboxError("no answer from the service within %ss" % idle, code="deadline_exceeded") from e
        except ssl.SSLError as e:
            raise _tls_error(c.address, e) from e
        except OSError as e:
            raise SandboxError("cannot reach the service at %s: %s" % (c.address, e), code="unavailable") from e
        resp = _Response(reader, writer, idle, c.address, c._tls is not None)
        try:
            host = "localhost" if c._tls is None else ("[%s]" % c.host if ":" in c.host else c.host)
            head = ["POST /%s/%s HTTP/1.1" % (SERVICE, method), "Host: " + host, "Content-Length: %d" % len(body)]
            head += ["%s: %s" % kv for kv in c._headers(content_type, session).items()]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await resp._wait(writer.drain())
            await resp.read_head()
        except BaseException:
            writer.close()
            raise
        return resp

    async def _unary(self, method: str, msg: Mapping[str, Any], timeout: Union[float, None, str] = "default",
                     session: Optional[str] = None) -> Dict[str, Any]:
        t = self.timeout if timeout == "default" else timeout
        msg = self._c._expect(method, msg, session)
        resp = await self._open(method, json.dumps(msg).encode(), "application/json", t, session)  # type: ignore[arg-type]
        try:
            data = await resp.read_all()
        finally:
            resp.close()
        if resp.status != 200:
            try:
                obj = json.loads(data)
            except ValueError:
                obj = {"message": data.decode("utf-8", "replace")}
            raise _error(obj, _HTTP_CODES.get(resp.status, "unknown"), session)
        out = json.loads(data) if data else {}
        self._c._learn(session, out)
        return out

    async def _stream(self, method: str, msg: Mapping[str, Any], idle: Optional[float],
                      session: Optional[str] = None) -> AsyncIterator[Dict[str, Any]]:
        body = json.dumps(self._c._expect(method, msg, session)).encode()
        resp = await self._open(method, struct.pack(">BI", 0, len(body)) + body, "application/connect+json", idle, session)
        try:
            if resp.status != 200:
                data = await resp.read_all()
                try:
                    obj = json.loads(data)
                except ValueError:
                    obj = {"message": data.decode("utf-8", "replace")}
                raise _error(obj, _HTTP_CODES.get(resp.status, "unknown"), session)
            buf = b""
            while True:
                while len(buf) >= 5:
                    flags, n = struct.unpack(">BI", buf[:5])
                    if len(buf) < 5 + n:
                        break
                    payload, buf = buf[5:5 + n], buf[5 + n:]
                    if flags & _COMPRESSED:
                        raise SandboxError("compressed frame, though none was asked for", code="internal")
                    obj = json.loads(payload) if payload else {}
                    if flags & _END_STREAM:
                        if obj.get("error"):
                            raise _error(obj["error"], session=session)
                        return
                    self._c._learn(session, obj)
                    yield obj
                c = await resp.chunk()
                if not c:
                    raise SandboxError("the service closed the stream without its end", code="unavailable")
                buf += c
        finally:
            # Also when the caller stops early: closing the connection is
            # what cancels the command on the service's side.
            resp.close()

    # ---- commands ----

    async def _answer(self, req: ApprovalRequest) -> None:
        approver = self.approver
        assert approver is not None
        try:
            if inspect.iscoroutinefunction(approver):
                ok = await approver(req)
            else:
                # A plain function may block (a prompt): not on the loop.
                ok = await asyncio.get_running_loop().run_in_executor(None, approver, req)
                if inspect.isawaitable(ok):
                    ok = await ok
            ok = ok is True
        except Exception:  # an approver that fails does not approve
            ok = False
        try:
            await self._unary("Approve", {"id": req.id, "approved": ok}, session=req.session)
        except SandboxError:
            pass  # timed out or answered elsewhere meanwhile: the command says so

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stream(self, argv: Sequence[str], stdin_stream: bool = False, **kwargs: Any) -> "AsyncExecution":
        """Runs argv and returns its AsyncExecution: ``async for`` over it
        yields the output as it arrives, then one Event of kind "exit"; as
        Client.stream. Nothing is sent before the iteration begins; bad
        options raise here."""
        if _flag("stdin_stream", stdin_stream) and kwargs.get("stdin") is not None:
            raise TypeError("stdin is either one buffer up front (stdin=) or a stream (stdin_stream=True), not both")
        req = self._c._request(argv, **kwargs)
        req["signalKey"] = "sig-" + _secrets.token_hex(16)
        if stdin_stream:
            req["stdinStream"] = True
        if self.approver is not None:
            req["answerApprovals"] = True
        limit = req.get("timeoutSeconds")
        return AsyncExecution(self, req, None if limit is None else limit + 30.0)

    async def exec(self, argv: Sequence[str], check: bool = False, **kwargs: Any) -> Result:
        """Runs argv and returns its Result, as Client.exec."""
        _flag("check", check)
        if kwargs.get("stdin_stream") is not None:
            raise TypeError("exec returns at the end, so nothing could write to a streamed stdin: use stream(..., stdin_stream=True)")
        return await self.stream(argv, **kwargs).wait(check=check)

    async def start(self, argv: Sequence[str], tty: bool = False, rows: Optional[int] = None, cols: Optional[int] = None,
                    **kwargs: Any) -> "AsyncProcess":
        """Starts argv as a process that outlives this call, as Client.start."""
        if kwargs.get("stdin") is not None:
            raise TypeError("a process's stdin comes from AsyncProcess.write")
        req: Dict[str, Any] = {"command": self._c._request(argv, **kwargs)}
        if _flag("tty", tty):
            r, c = _size(24 if rows is None else rows, 80 if cols is None else cols)
            req.update({"tty": True, "rows": r, "cols": c})
        elif rows is not None or cols is not None:
            raise TypeError("rows and cols are a terminal's size: pass tty=True with them")
        session = req["command"]["session"]
        if self.approver is not None:
            # As Client.start: the process's requests go to this client's
            # approver through an Approvals stream of its own key.
            key = "apr-" + _secrets.token_hex(16)
            req["approvalKey"] = key
            self._spawn(self._serve_approvals(key, session))
        r = await self._unary("StartProcess", req, session=session)
        return AsyncProcess(self, str(r.get("id", "")), session)

    async def _serve_approvals(self, key: str, session: str) -> None:
        try:
            async for msg in self._stream("Approvals", {"key": key}, None, session=session):
                await self._answer(ApprovalRequest._from_json(msg))
        except SandboxError:
            pass  # the service went away: the process is denied and says so

    async def processes(self, session: str = "") -> List[Dict[str, Any]]:
        """As Client.processes."""
        out = []
        r = await self._unary("ListProcesses", {"session": session}, session=session or None)
        for p in r.get("processes", []):
            p = dict(p)
            p["startedUnixMs"] = int(p.get("startedUnixMs") or 0)
            p["exitCode"] = int(p.get("exitCode") or 0)
            p["exited"] = bool(p.get("exited", False))
            out.append(p)
        return out

    # ---- approvals, sessions, grants ----

    async def approve(self, request_id: str, approved: bool, session: Optional[str] = None) -> None:
        """As Client.approve."""
        await self._unary("Approve", {"id": request_id, "approved": bool(approved)}, session=session)

    async def approvals(self) -> AsyncIterator[ApprovalRequest]:
        """Approval requests of commands whose clients do not answer their
        own, until the service stops; answer each with approve()."""
        stream = self._stream("Approvals", {}, None)
        try:
            async for msg in stream:
                yield ApprovalRequest._from_json(msg)
        finally:
            await stream.aclose()

    async def sessions(self) -> List[Dict[str, Any]]:
        return list((await self._unary("Sessions", {"list": {}})).get("sessions", []))

    async def describe(self, session: str) -> Dict[str, Any]:
        s = (await self._unary("Sessions", {"describe": {"session": session}}, session=session)).get("sessions", [])
        return dict(s[0]) if s else {}

    async def forget(self, session: str) -> None:
        """As Client.forget: the remembered incarnation goes too."""
        self._c._drop(session)
        await self._unary("Sessions", {"forget": {"session": session}}, session=session)

    async def delete(self, session: str) -> None:
        """As Client.delete: the session's processes end, its HOME, grants
        and the workspace the service made for it are removed."""
        self._c._drop(session)
        await self._unary("Sessions", {"delete": {"session": session}}, session=session)

    async def grants(self, session: str) -> Dict[str, Any]:
        return await self._unary("Grants", {"list": {"session": session}}, session=session)

    async def changes(self, session: str) -> List[Change]:
        """As Client.changes."""
        r = await self._unary("Changes", _paths_msg(session, None), session=session)
        return [Change._from_json(c) for c in r.get("changes", [])]

    async def diff(self, session: str, paths: Optional[Sequence[str]] = None) -> str:
        """As Client.diff."""
        return str((await self._unary("Diff", _paths_msg(session, paths), session=session)).get("diff", ""))

    async def apply(self, session: str, paths: Optional[Sequence[str]] = None, allow_large: bool = False) -> ApplyResult:
        """As Client.apply."""
        msg = _paths_msg(session, paths)
        if allow_large:
            msg["allowLarge"] = True
        return ApplyResult._from_json(await self._unary("Apply", msg, session=session))

    async def discard(self, session: str) -> None:
        """As Client.discard."""
        await self._unary("Discard", _paths_msg(session, None), session=session)

    async def revoke(self, session: str, grant_id: str) -> Dict[str, Any]:
        return await self._unary("Grants", {"revoke": {"session": session, "grantId": grant_id}}, session=session)

    async def apply_network_grant(self, session: str, host: str, port: int, expected_digest: str) -> Dict[str, Any]:
        return await self._unary("Grants", {"applyNetwork": {"session": session, "host": host, "port": int(port),
                                                             "expectedDigest": expected_digest}}, session=session)

    @property
    def files(self) -> "AsyncFiles":
        """``Client.files`` as coroutines (``await c.files.read(S, path)``)."""
        from ._files import AsyncFiles
        return AsyncFiles(self)

    async def capabilities(self) -> Dict[str, Any]:
        r = await self._unary("Capabilities", {})
        report = json.loads(r.get("reportJson", "{}"))
        report["node_id"] = str(r.get("nodeId", ""))
        return report

    async def drain(self) -> Dict[str, Any]:
        """As Client.drain."""
        r = await self._unary("Drain", {})
        return {"node_id": str(r.get("nodeId", "")), "started": bool(r.get("started", False)),
                "sessions": int(r.get("sessions", 0)), "running_commands": int(r.get("runningCommands", 0)),
                "running_processes": int(r.get("runningProcesses", 0))}

    def incarnation(self, session: str) -> str:
        """As Client.incarnation."""
        return self._c.incarnation(session)

    async def check_policy(self, command: str) -> Dict[str, str]:
        r = await self._unary("CheckPolicy", {"command": command})
        return {"verdict": r.get("verdict", ""), "rule": r.get("rule", ""), "reason": r.get("reason", "")}


class AsyncExecution:
    """A command run by AsyncClient.stream: ``async for`` over it for its
    Events; ``await wait()`` for its Result; signal(), write() and
    close_stdin() reach the command while it runs, from any task. Closing it
    (``await aclose()``, or leaving ``async with``) closes the call, which
    kills a command still running. Leaving the iteration early does not end
    it (as in Client.stream): close it."""

    def __init__(self, client: AsyncClient, req: Dict[str, Any], idle: Optional[float]) -> None:
        self.client = client
        self.signal_key: str = req["signalKey"]
        self.session: str = req["session"]
        self._req = req
        self._idle = idle
        self._stdin_stream = bool(req.get("stdinStream"))
        self._sent = False
        self._running = False
        self._ended = False
        self._closed = False
        self._failure: Optional[BaseException] = None
        self._stdout: List[bytes] = []
        self._stderr: List[bytes] = []
        self.result: Optional[Result] = None
        self._events = self._run()

    async def _run(self) -> AsyncIterator[Event]:
        self._sent = True
        client = self.client
        # Closed explicitly when this generator is: an async generator left
        # to the loop's finalizer would keep the command running meanwhile.
        stream = client._stream("Execute", self._req, self._idle, session=self.session)
        try:
            async for msg in stream:
                self._running = True
                if "output" in msg:
                    out = msg["output"]
                    kind = "stderr" if out.get("stream") == "STREAM_STDERR" else "stdout"
                    data = _b64(out.get("data"))
                    (self._stderr if kind == "stderr" else self._stdout).append(data)
                    yield Event(kind=kind, data=data)
                elif "approvalRequest" in msg:
                    if client.approver is not None:
                        # Answered in a task of its own: the stream must
                        # keep being read meanwhile.
                        client._spawn(client._answer(ApprovalRequest._from_json(msg["approvalRequest"])))
                elif "result" in msg:
                    self.result = _final_result(msg["result"], self._stdout, self._stderr)
                    self._stdout, self._stderr = [], []
                    yield Event(kind="exit", result=self.result)
        except Exception as e:
            self._failure = e
            raise
        finally:
            self._ended = True
            await stream.aclose()

    def __aiter__(self) -> "AsyncExecution":
        return self

    async def __anext__(self) -> Event:
        return await self._events.__anext__()

    async def __aenter__(self) -> "AsyncExecution":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the call; a command still running is killed."""
        if self.result is None and self._sent:
            self._closed = True
        await self._events.aclose()

    async def wait(self, check: bool = False) -> Result:
        """Reads the rest of the stream and returns the Result, as
        Execution.wait."""
        _flag("check", check)
        async for _ in self:
            pass
        if self.result is None:
            if self._failure is not None:
                raise self._failure
            if self._closed:
                raise SandboxError("the call was closed before the command ended", code="canceled")
            raise SandboxError("the service ended the stream without a result", code="internal")
        if check and self.result.denied:
            raise Denied(self.result)
        return self.result

    async def _call(self, method: str, msg: Dict[str, Any], timeout: Union[float, None, str] = "default") -> Dict[str, Any]:
        # As Execution._call: until the first message the service may not
        # have the call yet, so not_found is tried again for a while.
        if not self._sent:
            raise SandboxError("the command has not been sent yet: iterate the stream (or await wait()) first",
                               code="not_found", reason_code="not_running", field="signal_key")
        loop = asyncio.get_running_loop()
        t = self.client.timeout
        deadline = None if t is None else loop.time() + t
        pause = 0.005
        while True:
            if self._ended:
                raise SandboxError("the command has ended", code="not_found", reason_code="not_running", field="signal_key")
            running = self._running
            try:
                return await self.client._unary(method, msg, timeout, session=self.session)
            except SandboxError as e:
                if e.code != "not_found" or running:
                    raise
                if deadline is not None and loop.time() > deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(2 * pause, 0.1)

    async def signal(self, name: str) -> None:
        """As Execution.signal."""
        await self._call("Signal", {"signalKey": self.signal_key, "signal": _signal_name(name)})

    async def write(self, data: Union[bytes, str]) -> int:
        """As Execution.write: waits while the service holds 64 KiB the
        command has not read."""
        if not self._stdin_stream:
            raise TypeError("this command's stdin is not a stream: pass stdin_stream=True to stream()")
        if not isinstance(data, (bytes, bytearray, memoryview, str)):
            raise TypeError("data is bytes or str, got %r" % (type(data).__name__,))
        b = data.encode() if isinstance(data, str) else bytes(data)
        written = 0
        for i in range(0, len(b), _STDIN_CHUNK):
            piece = b[i:i + _STDIN_CHUNK]
            r = await self._call("WriteStdin", {"signalKey": self.signal_key, "data": base64.b64encode(piece).decode()}, None)
            n = int(r.get("written", 0))
            written += n
            if n < len(piece):
                break
        return written

    async def close_stdin(self) -> None:
        """Ends the streamed stdin."""
        if not self._stdin_stream:
            raise TypeError("this command's stdin is not a stream: pass stdin_stream=True to stream()")
        await self._call("CloseStdin", {"signalKey": self.signal_key})


class AsyncProcess:
    """A process started by AsyncClient.start: Process's methods as
    coroutines."""

    def __init__(self, client: AsyncClient, id: str, session: Optional[str] = None) -> None:
        self.client = client
        self.id = id
        self.session = session
        self.offset = 0
        self.dropped = 0
        self.exited = False
        self.result: Optional[Result] = None

    async def write(self, data: Union[bytes, str]) -> int:
        b = data.encode() if isinstance(data, str) else bytes(data)
        r = await self.client._unary("WriteProcess", {"id": self.id, "data": base64.b64encode(b).decode()}, None,
                                     session=self.session)
        return int(r.get("written", 0))

    async def close_stdin(self) -> None:
        await self.client._unary("CloseProcessStdin", {"id": self.id}, session=self.session)

    async def read(self, timeout: float = 1.0) -> bytes:
        """The output since the last read, waiting up to timeout seconds
        when there is none yet (0: at once), as Process.read."""
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
            raise TypeError("timeout is a number of seconds, got %r" % (timeout,))
        if not 0 <= float(timeout) < math.inf:
            raise ValueError("timeout is a finite number of seconds >= 0 (the service waits at most 60), got %r" % (timeout,))
        wait = float(timeout)
        r = await self.client._unary("ReadProcess", {"id": self.id, "offset": str(self.offset), "waitSeconds": wait},
                                     wait + 30.0, session=self.session)
        self.offset = int(r.get("nextOffset", self.offset))
        self.dropped += int(r.get("dropped", 0))
        if r.get("exited"):
            self.exited = True
            if "result" in r:
                self.result = Result._from_json(r["result"])
        return _b64(r.get("data"))

    async def resize(self, rows: int, cols: int) -> None:
        r, c = _size(rows, cols)
        await self.client._unary("ResizeProcess", {"id": self.id, "rows": r, "cols": c}, session=self.session)

    async def signal(self, name: str) -> None:
        await self.client._unary("SignalProcess", {"id": self.id, "signal": _signal_name(name)}, session=self.session)

    async def wait(self, timeout: Optional[float] = None) -> Result:
        """Waits for the end and returns the Result; None or 0: no bound."""
        if _is_zero(timeout):
            timeout = None
        if timeout is not None:
            timeout = _seconds("timeout", timeout, "None or 0 for no bound")
        r = await self.client._unary("WaitProcess", {"id": self.id}, timeout, session=self.session)
        self.exited = True
        self.result = Result._from_json(r.get("result", {}))
        return self.result


__all__ = ["AsyncClient", "AsyncExecution", "AsyncProcess", "AsyncApprover"]
