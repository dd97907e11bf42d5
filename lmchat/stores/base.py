"""The session store protocol: where the REPL and the session manager keep sessions.

A store maps a session id to the JSON of :meth:`lmchat.Session.to_dict`, kept
as *records*: a base snapshot and the patches appended since
(:mod:`lmchat.session.patches`), with a version that grows by one on every
write. ``save(data, expected_version=n)`` writes a whole snapshot (a new base);
``append(id, patch, expected_version=n, summary=...)`` adds one turn's patch,
O(turn). Both are compare-and-sets: they write only if the stored version is
still ``n`` (``0``: the session must not exist yet), so two writers of one
session never silently overwrite each other. :meth:`SessionStore.load` returns
the base with every later patch applied, plus ``VERSION_KEY``, the version to
pass back as ``expected_version``. Stores fold the patches into a new base when
they outgrow it (:mod:`.records`).

A session dict may carry an ``"owner"`` string (the session manager stores a
hash of the API key there): stores index it so ``list(owner=...)`` shows one
owner's sessions. Sessions without it (the REPL's) have the owner ``""``.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from ..errors import StoreError
from ..jsontypes import JSONObject

if TYPE_CHECKING:  # no import at run time: the store sits below the session
    from ..session import Session

#: key that :meth:`SessionStore.load` adds to the returned dict: the stored version
VERSION_KEY = "store_version"
TITLE_CHARS = 60


def version_of(snapshot: Mapping[str, object]) -> int:
    """The version :meth:`SessionStore.load` put in ``snapshot`` under :data:`VERSION_KEY` (0: none)."""
    version = snapshot.get(VERSION_KEY, 0)
    return version if isinstance(version, int) else 0


@attrs.frozen
class SessionInfo:
    """One line of :meth:`SessionStore.list`; ``updated_at`` is seconds since the epoch."""

    id: str
    title: str
    turns: int
    updated_at: float
    template: str
    version: int
    owner: str = ""


@attrs.frozen
class Summary:
    """The columns :meth:`SessionStore.list` shows, given with each append so no store parses a snapshot."""

    title: str
    turns: int
    template: str
    owner: str = ""

    def __attrs_post_init__(self) -> None:
        bad = [name for name in ("title", "template", "owner") if not isinstance(getattr(self, name), str)]
        if bad or not isinstance(self.turns, int) or isinstance(self.turns, bool) or self.turns < 0:
            raise StoreError(f"a Summary has strings title, template, owner and a count of turns, got {self!r}")

    @classmethod
    def of(cls, snapshot: Mapping[str, object]) -> Summary:
        """The columns of a whole snapshot (reads every message: for saves, not per turn)."""
        earlier = snapshot.get("earlier")  # what the overflow policy dropped comes first (no list: none)
        kept = snapshot.get("messages")
        messages = [*(earlier if isinstance(earlier, list) else ()), *(kept if isinstance(kept, list) else ())]
        template = snapshot.get("template") or {}
        return cls(
            title=title_of(messages),
            turns=sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant"),
            template=str(template.get("name", "")) if isinstance(template, Mapping) else "",
            owner=str(snapshot.get("owner") or ""),
        )

    @classmethod
    def of_session(cls, session: Session, owner: str = "", *, turns: int | None = None) -> Summary:
        """The columns of a live :class:`lmchat.Session` after a turn.

        ``turns``: the caller's own count, when it keeps one; otherwise
        ``session.turns``, which counts on from where its last count ended.
        """
        return cls(title=_title_of_session(session), turns=session.turns if turns is None else turns,
                   template=str(getattr(session.template, "name", "") or ""), owner=owner)


def _title_of_session(session: Session) -> str:
    # the first user message sits at the start: stop there rather than copy session.messages (O(history)); the
    # overflow policy's earlier messages came before the rest
    chat = getattr(session, "_chat", None)
    messages = chat.messages if chat is not None else session.messages
    return title_of(itertools.chain(getattr(session, "_earlier", ())[:1], messages))


@runtime_checkable
class SessionStore(Protocol):
    #: where the sessions live, as ``open_store`` takes it (a Redis password masked)
    spec: str
    # optional capabilities: AsyncStore (the writes awaited on an event loop), Expiring (sessions
    # that expire)

    def save(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
             token: str | None = None) -> int:
        """Write a whole snapshot (a new base) and return its new version; :class:`StoreConflict` on a CAS miss."""

    def append(self, session_id: str, patch: Mapping[str, object], *, expected_version: int, summary: Summary,
               token: str | None = None) -> int:
        """Add one turn's patch on top of ``expected_version``; the new version (+1), or :class:`StoreConflict`."""

    def load(self, session_id: str) -> JSONObject | None:
        """The base with every later patch applied, plus ``VERSION_KEY``; or None."""

    def compact(self, session_id: str) -> bool:
        """Fold the patches into a new base now (stores also do it by themselves); False when nothing changed."""

    def delete(self, session_id: str) -> None:
        """Forget a session, base and patches (no error when it is absent)."""

    def version(self, session_id: str) -> int:
        """The stored version (0: absent), without reading the session: a cheap freshness check."""

    def list(self, limit: int = 50, *, owner: str | None = None) -> list[SessionInfo]:
        """Sessions, most recently written first; only ``owner``'s when it is not None."""

    def latest(self) -> str | None:
        """Id of the most recently written session."""

    def close(self) -> None: ...


@runtime_checkable
class AsyncStore(Protocol):
    """A store whose writes can be awaited on an event loop (every :class:`~.records.RecordStore`)."""

    #: its reads are local and quick (SQLite, memory): the session manager then runs asyncio callers' turns on
    #: the event loop (with a backend that streams asynchronously), where a blocking read would stall it
    loop_safe: bool

    async def asave(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
                    token: str | None = None) -> int:
        """``save``, awaited."""

    async def aappend(self, session_id: str, patch: Mapping[str, object], *, expected_version: int,
                      summary: Summary, token: str | None = None) -> int:
        """``append``, awaited."""


@runtime_checkable
class Expiring(Protocol):
    """A store that forgets a session ``ttl`` seconds after its last write (Redis; None: never)."""

    ttl: float | None


@attrs.frozen
class Record:
    """What an implementation stores for one whole save: the JSON text and the indexed columns."""

    id: str
    data: str
    title: str
    turns: int
    template: str
    owner: str

    @property
    def summary(self) -> Summary:
        return Summary(self.title, self.turns, self.template, self.owner)


def record(session_dict: Mapping[str, object]) -> Record:
    """Check a session dict and derive the columns every store indexes."""
    session_id = session_dict.get("session_id") if isinstance(session_dict, Mapping) else None
    if not isinstance(session_id, str):
        raise StoreError("expected the dict of Session.to_dict() (with a 'session_id' string)")
    data = {k: v for k, v in session_dict.items() if k != VERSION_KEY}
    text = dumps(data, f"session {session_id}")
    summary = Summary.of(data)
    return Record(id=session_id, data=text, title=summary.title, turns=summary.turns,
                  template=summary.template, owner=summary.owner)


#: one encoder for every write (``json.dumps`` with options builds one per call). No circular check: what is
#: stored comes from JSON or ``json_copy``, trees; a cycle a caller built ends in RecursionError instead (and the
#: check took half the time of encoding a turn's patch)
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


def dumps(value: object, what: str) -> str:
    """Compact JSON, or a StoreError saying what could not be encoded."""
    try:
        return _ENCODE(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreError(f"{what} is not JSON-serialisable: {exc}") from None


def title_of(messages: Iterable[object]) -> str:
    """The first user message on one line, shortened: what `/sessions` shows."""
    for m in messages:
        if (type(m) is dict or isinstance(m, Mapping)) and m.get("role") == "user":  # an ABC check costs more
            content = m.get("content")
            if isinstance(content, list):  # multimodal parts: their text only
                content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
            text = " ".join(str(content or "").split())
            return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"
    return ""
