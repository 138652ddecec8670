"""Layered sessions: a session run with ``layered=True`` sees its workspace
through an overlay whose upper layer is its own; the host's directory
changes only when you apply. ``changes(S)`` lists what the session changed,
``diff(S)`` shows it, ``apply(S, paths=None)`` brings it (all, or the given
workspace-relative paths) to the host and says what it applied, what it
refused and why, and what conflicted; ``discard(S)`` drops it all.
"""

from dataclasses import dataclass, field
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence


@dataclass(frozen=True)
class Change:
    """One change of a layered session: ``kind`` is "added", "modified",
    "deleted" or "type_changed"; ``type`` the session's entry type,
    ``old_type`` the host's; modes are permission bits with set-id bits."""
    path: str
    kind: str
    type: str = ""
    old_type: str = ""
    mode: int = 0
    old_mode: int = 0
    size: int = 0
    target: str = ""

    @classmethod
    def _from_json(cls, m: Mapping[str, Any]) -> "Change":
        return cls(path=m.get("path", ""), kind=m.get("kind", ""), type=m.get("type", ""),
                   old_type=m.get("oldType", ""), mode=int(m.get("mode", 0)), old_mode=int(m.get("oldMode", 0)),
                   size=int(m.get("size", 0)), target=m.get("target", ""))


@dataclass(frozen=True)
class Refusal:
    """Something apply did not bring to the host: ``reason`` is a stable
    code ("protected", "git_shaped", "setid", "inside_git", ...)."""
    path: str
    reason: str
    detail: str = ""


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did. ``git`` is the git import's result (commits
    brought as objects and refs), or None when it did not run."""
    applied: List[str] = field(default_factory=list)
    refused: List[Refusal] = field(default_factory=list)
    conflicts: List[str] = field(default_factory=list)
    git: Optional[Dict[str, Any]] = None

    @property
    def clean(self) -> bool:
        """True when everything asked was applied."""
        return not self.refused and not self.conflicts

    @classmethod
    def _from_json(cls, m: Mapping[str, Any]) -> "ApplyResult":
        git = json.loads(m["gitJson"]) if m.get("gitJson") else None
        return cls(applied=list(m.get("applied", [])),
                   refused=[Refusal(path=r.get("path", ""), reason=r.get("reason", ""), detail=r.get("detail", ""))
                            for r in m.get("refused", [])],
                   conflicts=list(m.get("conflicts", [])), git=git)


def _paths_msg(session: str, paths: Optional[Sequence[str]]) -> Dict[str, Any]:
    if not isinstance(session, str) or not session:
        raise TypeError("session is a non-empty str")
    msg: Dict[str, Any] = {"session": session}
    if paths is not None:
        if isinstance(paths, (str, bytes)) or not all(isinstance(p, str) for p in paths):
            raise TypeError("paths is a list of workspace-relative str paths, e.g. ['src/a.py'], got %r" % (paths,))
        msg["paths"] = list(paths)
    return msg
