"""Picking a stored conversation up again: finding it by id prefix, and the recap a resumed session shows.

``lmchat chat --resume`` continues the last conversation saved, ``--resume ID`` and ``/sessions ID`` a given
one. One-shots (``lmchat chat "question"``) are not saved unless ``--save`` asks, so ``--resume`` never
lands on one. A resumed session says where it stands: its last exchange, and how much of it the engine's
cache still serves (a KV file on disk, say), so the user knows what the next turn costs.
"""
from __future__ import annotations

from ..backends.base import PrefixCache
from ..errors import SessionError
from ..session.edits import restored
from ..stores import SessionStore, version_of
from .conversation import Conversation, printable, turns

#: a recap shows this many characters of each message of the last exchange
RECAP_CHARS = 160
TIERS = {"session": "this session's own sequence", "resident": "another sequence", "host": "host memory",
         "disk": "a KV file on disk"}


def find(store: SessionStore, prefix: str) -> str | None:
    """A stored id from its unique prefix (what /sessions shows)."""
    if store.load(prefix) is not None:
        return prefix
    matches = [i.id for i in store.list(limit=10_000) if i.id.startswith(prefix)]
    if len(matches) > 1:
        raise SessionError(f"{printable(prefix)}: ambiguous, matches {', '.join(m[:12] for m in matches[:5])}")
    return matches[0] if matches else None


def recap(conv: Conversation) -> str:
    """The last exchange of the session, each message on a line and cut short, then what the cache holds."""
    session = conv.session
    last_user = session.last_user()
    answer = next((m.get("content") for m in reversed(session.messages_since(max(0, len(session.messages) - 4)))
                   if m["role"] == "assistant"), None) if session.turns else None
    lines = [f"{turns(session.turns)}; the last exchange:" if session.turns else "no turns yet"]
    if last_user:
        lines.append(f"  you: {_short(last_user)}")
    if isinstance(answer, str):
        lines.append(f"  model: {_short(answer)}")
    lines.append(cache_line(conv))
    return "\n".join(lines)


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return printable(flat if len(flat) <= RECAP_CHARS else flat[: RECAP_CHARS - 1] + "…")


def cache_line(conv: Conversation) -> str:
    """How much of the next turn's prompt the engine's cache serves, and from where (``/show cache``)."""
    ids = conv.session.context_ids
    if not isinstance(conv.backend, PrefixCache):
        return f"the {conv.backend.name} backend does not report its cache"
    if not ids:
        return "nothing to reuse yet: the next turn prefills its whole prompt"
    n, where = conv.backend.cached(conv.session.session_id, ids)
    if not n:
        return f"the engine holds none of this conversation's {len(ids)} tokens: the next turn prefills them all"
    tier = TIERS.get(where or "", where)
    return (f"{n} of this conversation's {len(ids)} tokens are cached, in {tier}: the next turn "
            f"prefills the other {len(ids) - n} and its new message")


def switch(conv: Conversation, prefix: str) -> str:
    """Continue the stored session ``prefix`` names (the current one stays stored as last saved); its recap."""
    session_id = find(conv.store, prefix)
    data = conv.store.load(session_id) if session_id else None
    if not session_id or data is None:  # (no id: no data)
        raise SessionError(f"no stored session {printable(prefix)}: /sessions lists them")
    conv.restore_settings(data)
    conv.replace(restored(data, conv.tokenizer, "resumed: the engine holds nothing for this session"),
                 version_of(data))
    return f"continuing session {printable(session_id[:8])}: {recap(conv)}"
