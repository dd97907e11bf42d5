"""Session ids, owners, and what a save writes."""
from __future__ import annotations

import hashlib
import re
import uuid

from ..errors import ConfigError
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


def dump(session: Session, owner: str, engine: str | None = None) -> dict:
    """What a commit saves: the session's snapshot plus who may see it and which engine it runs on."""
    data = session.to_dict()
    data["owner"] = owner
    if engine:
        data["engine"] = engine
    return data
