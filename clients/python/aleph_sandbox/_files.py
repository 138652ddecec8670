"""The files API: ``client.files`` (and ``AsyncClient.files``).

Paths are relative to the session's workspace, the directory its commands
run in (made on first use, as ``exec`` makes it). The service enforces the
rules: a path is never absolute and has no ``..``; a link never leads out of
the workspace; protected entries (``.git``, tool configs such as
``.vscode``) are never written or removed (``SandboxError`` with
``reason_code == "protected_entry"`` and the entry in ``rule``); a FIFO or
device is never opened; sizes are bounded by the service's
``files_max_bytes`` (``reason_code == "resource_exhausted"``, ``field`` the
limit's name); a write is atomic.

Every call takes ``workspace=``: a workspace the caller names (an absolute
path), as ``exec(..., workspace=DIR)`` names one, checked as exec checks it;
``None`` is the session's own. Every call is served there; a write to a
live workspace is searched for a planted git repository as a command's
writes are (a ``HEAD`` git would accept is renamed ``HEAD.aleph-quarantined``,
and the audit record says so). On a layered session only its layer's workspace is
accepted, and the calls reach the session's view of it, writes included.
"""

from __future__ import annotations

import base64
import io
import secrets as _secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Union

if TYPE_CHECKING:  # pragma: no cover
    from . import Client
    from ._aio import AsyncClient

#: The data of one WriteFile request: a file bigger than this goes in parts
#: (one upload, atomic), each well under the service's request bound (4
#: MiB by default, base64 included).
WRITE_CHUNK = 1 << 20

Data = Union[bytes, bytearray, memoryview, str, io.IOBase]


@dataclass
class FileInfo:
    """One entry of a workspace, not followed when it is a link."""

    name: str
    #: "file", "dir", "link" or "other" (a FIFO, device or socket).
    kind: str
    size: int
    #: Permission bits (0o7777).
    mode: int
    #: Modification time, seconds since the epoch.
    mtime: float
    #: A link's target, as stored ("" otherwise).
    target: str = ""

    @classmethod
    def _from_json(cls, m: Mapping[str, Any]) -> "FileInfo":
        return cls(name=str(m.get("name", "")), kind=str(m.get("kind", "")), size=int(m.get("size", 0) or 0),
                   mode=int(m.get("mode", 0) or 0), mtime=int(m.get("mtimeUnixMs", 0) or 0) / 1000.0,
                   target=str(m.get("target", "")))


def _path(path: Any) -> str:
    if not isinstance(path, str):
        raise TypeError("path must be a str relative to the session's workspace, got %s" % type(path).__name__)
    return path


def _session(session: Any) -> str:
    if not isinstance(session, str) or not session:
        raise ValueError("session must be a non-empty str")
    return session


def _req(session: Any, path: Any, workspace: Optional[str], **extra: Any) -> Dict[str, Any]:
    """A request's common fields: workspace only when named."""
    r: Dict[str, Any] = {"session": _session(session), "path": _path(path)}
    if workspace is not None:
        if not isinstance(workspace, str) or not workspace:
            raise ValueError("workspace must be a non-empty str (an absolute path) or None")
        r["workspace"] = workspace
    r.update(extra)
    return r


def _mode(mode: Optional[int]) -> int:
    if mode is None:
        return 0
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 < mode <= 0o7777:
        raise ValueError("mode must be permission bits between 0o1 and 0o7777 (None keeps an existing file's, "
                         "or 0o644), got %r" % (mode,))
    return mode


def _chunks(data: Data) -> Iterator[bytes]:
    """data as parts of at most WRITE_CHUNK bytes (at least one part)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        b = bytes(data)
        yield b[:WRITE_CHUNK]
        for i in range(WRITE_CHUNK, len(b), WRITE_CHUNK):
            yield b[i:i + WRITE_CHUNK]
        return
    if hasattr(data, "read"):
        first = True
        while True:
            c = data.read(WRITE_CHUNK)
            if isinstance(c, str):
                c = c.encode("utf-8")
            if not c:
                if first:
                    yield b""
                return
            first = False
            yield bytes(c)
    raise TypeError("data must be bytes, str or a binary file object, got %s" % type(data).__name__)


def _write_parts(session: str, path: str, data: Data, mode: Optional[int], parents: bool,
                 workspace: Optional[str] = None) -> Iterator[Dict[str, Any]]:
    """The WriteFile requests of one write: one for a small file, else the
    parts of an upload (each naming the next's offset)."""
    base = _req(session, path, workspace, mode=_mode(mode), parents=bool(parents))
    it = _chunks(data)
    cur = next(it)
    nxt = next(it, None)
    if nxt is None:
        yield dict(base, data=base64.b64encode(cur).decode())
        return
    upload, off = _secrets.token_hex(16), 0
    while cur is not None:
        req = dict(base, data=base64.b64encode(cur).decode(), uploadId=upload, offset=str(off), more=nxt is not None)
        yield req
        off += len(cur)
        cur, nxt = nxt, (next(it, None) if nxt is not None else None)


class Files:
    """``client.files``: read, write, list, stat and remove files of a
    session's workspace."""

    def __init__(self, client: "Client") -> None:
        self._c = client

    def write(self, session: str, path: str, data: Data, mode: Optional[int] = None, parents: bool = True,
              workspace: Optional[str] = None) -> FileInfo:
        """Writes data (bytes, str as UTF-8, or a binary file object, read
        in parts) to path, replacing it atomically. mode: permission bits
        (None keeps an existing file's, or 0o644); parents: create missing
        directories."""
        r: Dict[str, Any] = {}
        for req in _write_parts(session, path, data, mode, parents, workspace):
            r = self._c._unary("WriteFile", req, session=session)
        return FileInfo._from_json(r.get("info", {}))

    def read_stream(self, session: str, path: str, workspace: Optional[str] = None) -> Iterator[bytes]:
        """The file's bytes in chunks, as the service sends them (large
        files are never held whole)."""
        for m in self._c._stream("ReadFile", _req(session, path, workspace), self._c.timeout, session=session):
            if m.get("data"):
                yield base64.b64decode(m["data"])

    def read(self, session: str, path: str, workspace: Optional[str] = None) -> bytes:
        """The whole file."""
        return b"".join(self.read_stream(session, path, workspace))

    def list(self, session: str, path: str = ".", workspace: Optional[str] = None) -> List[FileInfo]:
        """The entries of a directory, sorted by name."""
        r = self._c._unary("ListFiles", _req(session, path, workspace), session=session)
        return [FileInfo._from_json(e) for e in r.get("entries", [])]

    def stat(self, session: str, path: str, workspace: Optional[str] = None) -> FileInfo:
        r = self._c._unary("StatFile", _req(session, path, workspace), session=session)
        return FileInfo._from_json(r.get("info", {}))

    def remove(self, session: str, path: str, recursive: bool = False, workspace: Optional[str] = None) -> None:
        """Removes a file, a link (never its target) or an empty directory;
        recursive removes a directory with what it holds."""
        self._c._unary("RemoveFile", _req(session, path, workspace, recursive=bool(recursive)), session=session)


class AsyncFiles:
    """``AsyncClient.files``: ``Files`` as coroutines."""

    def __init__(self, client: "AsyncClient") -> None:
        self._c = client

    async def write(self, session: str, path: str, data: Data, mode: Optional[int] = None,
                    parents: bool = True, workspace: Optional[str] = None) -> FileInfo:
        r: Dict[str, Any] = {}
        for req in _write_parts(session, path, data, mode, parents, workspace):
            r = await self._c._unary("WriteFile", req, session=session)
        return FileInfo._from_json(r.get("info", {}))

    async def read_stream(self, session: str, path: str, workspace: Optional[str] = None) -> AsyncIterator[bytes]:
        async for m in self._c._stream("ReadFile", _req(session, path, workspace), self._c.timeout, session=session):
            if m.get("data"):
                yield base64.b64decode(m["data"])

    async def read(self, session: str, path: str, workspace: Optional[str] = None) -> bytes:
        parts = []
        async for c in self.read_stream(session, path, workspace):
            parts.append(c)
        return b"".join(parts)

    async def list(self, session: str, path: str = ".", workspace: Optional[str] = None) -> List[FileInfo]:
        r = await self._c._unary("ListFiles", _req(session, path, workspace), session=session)
        return [FileInfo._from_json(e) for e in r.get("entries", [])]

    async def stat(self, session: str, path: str, workspace: Optional[str] = None) -> FileInfo:
        r = await self._c._unary("StatFile", _req(session, path, workspace), session=session)
        return FileInfo._from_json(r.get("info", {}))

    async def remove(self, session: str, path: str, recursive: bool = False,
                     workspace: Optional[str] = None) -> None:
        await self._c._unary("RemoveFile", _req(session, path, workspace, recursive=bool(recursive)), session=session)
