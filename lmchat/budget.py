"""Overflow policies: what a session does when a turn would not fit in ``session_len``.

``'error'`` raises :class:`~lmchat.errors.SessionLengthExceeded` (the session's
default). ``'truncate'`` drops the oldest whole exchanges (a user message and
everything up to the next one), keeps the system prompt, and returns a reset
delta whose ``dropped`` says how many messages went. Nothing is ever dropped
silently.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import SessionLengthExceeded
from .templates.base import Chat
from .tokens import encode_prompt

if TYPE_CHECKING:
    from .session import Session, _Plan


def truncate(session: "Session", max_new_tokens: int, used: int, new: int) -> "_Plan":
    chat = session._chat
    messages = chat.messages
    first = 1 if messages and messages[0]["role"] == "system" else 0
    current = session._rendered  # the new turn starts here: it is always kept
    cuts = [j for j in range(first + 1, current) if messages[j]["role"] == "user"] + [current]

    def size(cut: int) -> int:
        trial = Chat(messages[:first] + messages[cut:], tools=chat.tools, date=chat.date, kwargs=chat.kwargs)
        return len(encode_prompt(session.template, trial, session._codec)[1])

    # fewer messages never render longer, so the smallest cut that fits is found by bisection
    lo, hi = 0, len(cuts) - 1
    if size(cuts[hi]) + max_new_tokens > session.session_len:
        raise SessionLengthExceeded(used=used, new=new, max_new_tokens=max_new_tokens, limit=session.session_len)
    while lo < hi:
        mid = (lo + hi) // 2
        if size(cuts[mid]) + max_new_tokens <= session.session_len:
            hi = mid
        else:
            lo = mid + 1
    dropped = cuts[lo] - first
    del messages[first:cuts[lo]]
    chat.forget_rounds()
    session._offsets = []
    plan = session._plan_full(f"dropped the {dropped} oldest messages to fit session_len {session.session_len}")
    plan.delta = _with_dropped(plan.delta, dropped)
    return plan


def _with_dropped(delta, dropped: int):
    import attrs

    return attrs.evolve(delta, dropped=dropped)
