"""Session ids, owners, store keys, and what a save writes."""
from __future__ import annotations

import hashlib
import re
import uuid

from ..errors import ConfigError
from ..jsontypes import JSONObject
from ..session import Session

#: ids go into store keys and URLs: printable, no spaces or slashes
SESSION_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")


def owner_key(owner: str | None) -> str:
    """What the store keeps for an owner: a hash (API keys are never stored), '' for none."""
    return "" if owner is None else hashlib.sha256(f"lmchat-owner:{owner}".encode()).hexdigest()[:32]


def checked_id(session_id: str | None) -> str:
    """``session_id`` if it is a valid id, a new random one for None."""
    if session_id is None:
        return uuid.uuid4().hex
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise ConfigError(
            f"a session id is 1-128 of A-Z a-z 0-9 . _ : @ -, got {session_id!r}", field="session_id"
        )
    return session_id


def store_key(session_id: str, owner: str) -> str:
    """The session's key in the store and the backend: its id within its owner's namespace.

    Two owners may use the same id without seeing each other (a ``/`` never
    appears in an id, so the key is unambiguous).
    """
    return f"{owner}/{session_id}" if owner else session_id


def oneoff_key(session_id: str, owner: str) -> str:
    """A one-off session's key in the backend (it has none in the store): its id within its owner's namespace,
    after a ``!`` that no :func:`store_key` holds, so a stored session made under the same id (a ``store: false``
    response shows its id) never shares the engine's state with it."""
    return f"!{store_key(session_id, owner)}"


def public_id(key: str) -> str:
    """The id a client uses, from a store key."""
    return key.rpartition("/")[2]


def dump(session: Session, key: str, owner: str, engine: str | None = None, extra: dict[str, object] | None = None,
         notes: list[object] | None = None) -> JSONObject:
    """What a whole save writes: the session's snapshot under its key, who may see it, its engine, and
    the caller's ``extra`` and ``notes`` (kept only when there are any)."""
    data = session.to_dict()
    data["session_id"] = key
    data["owner"] = owner
    if engine:
        data["engine"] = engine
    if extra:
        data["extra"] = extra
    if notes:
        data["notes"] = notes
    return data
