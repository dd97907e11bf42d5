"""The session store protocol: where the REPL (and later the server) keeps sessions.

A store maps a session id to the JSON of :meth:`lmchat.Session.to_dict`, with a
version that grows by one on every save. ``save(data, expected_version=n)`` is
a compare-and-set: it writes only if the stored version is still ``n`` (``0``:
the session must not exist yet), so two writers of one session never silently
overwrite each other. :meth:`SessionStore.load` returns the saved dict plus
``VERSION_KEY``, the version to pass back as ``expected_version``.

A session dict may carry an ``"owner"`` string (the session manager stores a
hash of the API key there): stores index it so ``list(owner=...)`` shows one
owner's sessions. Sessions without it (the REPL's) have the owner ``""``.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Protocol, runtime_checkable

import attrs

from ..errors import StoreError

#: key that :meth:`SessionStore.load` adds to the returned dict: the stored version
VERSION_KEY = "store_version"
TITLE_CHARS = 60


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


@runtime_checkable
class SessionStore(Protocol):
    #: where the sessions live, as ``open_store`` takes it (a Redis password masked)
    spec: str

    def save(self, session_dict: Mapping[str, Any], *, expected_version: int | None = None) -> int:
        """Write a session atomically and return its new version; :class:`StoreConflict` on a CAS miss."""

    def load(self, session_id: str) -> dict[str, Any] | None:
        """The saved dict plus ``VERSION_KEY``, or None."""

    def delete(self, session_id: str) -> None:
        """Forget a session (no error when it is absent)."""

    def version(self, session_id: str) -> int:
        """The stored version (0: absent), without reading the session: a cheap freshness check."""

    def list(self, limit: int = 50, *, owner: str | None = None) -> list[SessionInfo]:
        """Sessions, most recently saved first; only ``owner``'s when it is not None."""

    def latest(self) -> str | None:
        """Id of the most recently saved session."""

    def close(self) -> None: ...


@attrs.frozen
class Record:
    """What an implementation stores for one save: the JSON text and the indexed columns."""

    id: str
    data: str
    title: str
    turns: int
    template: str
    owner: str


def record(session_dict: Mapping[str, Any]) -> Record:
    """Check a session dict and derive the columns every store indexes."""
    if not isinstance(session_dict, Mapping) or not isinstance(session_dict.get("session_id"), str):
        raise StoreError("expected the dict of Session.to_dict() (with a 'session_id' string)")
    data = {k: v for k, v in session_dict.items() if k != VERSION_KEY}
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"session {data['session_id']} is not JSON-serialisable: {exc}") from None
    messages = data.get("messages") or []
    template = data.get("template") or {}
    return Record(
        id=data["session_id"],
        data=text,
        title=title_of(messages),
        turns=sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant"),
        template=str(template.get("name", "")) if isinstance(template, Mapping) else "",
        owner=str(data.get("owner") or ""),
    )


def title_of(messages) -> str:
    """The first user message on one line, shortened: what `/sessions` shows."""
    for m in messages:
        if isinstance(m, Mapping) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # multimodal parts: their text only
                content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
            text = " ".join(str(content or "").split())
            return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"
    return ""


def loaded(text: str, version: int, session_id: str) -> dict[str, Any]:
    """Parse stored JSON back into the dict ``load`` returns."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreError(f"session {session_id}: stored data is not valid JSON: {exc}") from None
    data[VERSION_KEY] = version
    return data
