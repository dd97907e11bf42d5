"""Overflow policies: what a session does when a turn would not fit in ``session_len``.

* ``'error'`` (the default) raises :class:`~lmchat.errors.SessionLengthExceeded`.
* ``'truncate'`` drops the oldest whole exchanges (a user message and everything
  up to the next one), keeps the system prompt, and returns a reset delta.
* ``'shift'`` drops the same exchanges *inside* the engine's cache: the delta
  carries ``discard=(start, count)``, the token range the engine removes before
  appending the delta (llama.cpp's context shift), so the system prompt and the
  latest turns are not prefilled again. It is used only when the shifted
  context is exactly the canonical prompt of the remaining conversation;
  otherwise the session falls back to ``'truncate'`` and says so.

``d.dropped`` counts the messages removed and ``d.reason`` says why: nothing is
ever dropped silently.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .errors import SessionLengthExceeded
from .templates.base import Chat
from .tokens import encode_prompt

if TYPE_CHECKING:
    from .session import Session, _Plan


def _cut(session: "Session", max_new_tokens: int, used: int, new: int) -> tuple[int, int]:
    """(first kept non-system index, first kept index): the fewest oldest exchanges to drop."""
    chat = session._chat
    messages = chat.messages
    first = 1 if messages and messages[0]["role"] == "system" else 0
    current = session._turn_start  # the new turn starts here: it is always kept
    cuts = [j for j in range(first + 1, current + 1) if messages[j]["role"] == "user"] or [current]

    def size(cut: int) -> int:
        trial = Chat(messages[:first] + messages[cut:], tools=chat.tools, date=chat.date, kwargs=chat.kwargs)
        return len(encode_prompt(session.template, trial, session._codec, session.injection)[1])

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
    return first, cuts[lo]


def _drop(session: "Session", first: int, cut: int) -> None:
    del session._chat.messages[first:cut]
    session._chat.forget_rounds()


def truncate(session: "Session", max_new_tokens: int, used: int, new: int, why: str = "") -> "_Plan":
    first, cut = _cut(session, max_new_tokens, used, new)
    _drop(session, first, cut)
    session._offsets = []
    plan = session._plan_full(f"dropped the {cut - first} oldest messages to fit session_len {session.session_len}{why}")
    plan.delta = attrs.evolve(plan.delta, dropped=cut - first)
    return plan


def shift(session: "Session", max_new_tokens: int, used: int, new: int) -> "_Plan":
    from .session import Delta, _Plan

    first, cut = _cut(session, max_new_tokens, used, new)
    chat, codec, template = session._chat, session._codec, session.template
    context, held = session.context, session._ids
    keep = session._offsets[first] if first < len(session._offsets) else len(context)
    resume = session._offsets[cut] if cut < session._rendered else len(context)
    trial = Chat(chat.messages[:first] + chat.messages[cut:], tools=chat.tools, date=chat.date, kwargs=chat.kwargs)
    template.check(trial)
    text, offsets = template.render_window(trial, 0)
    kept = context[:keep] + context[resume:]
    if not text.startswith(kept):
        return truncate(session, max_new_tokens, used, new, ": the remaining turns render differently")
    spans = codec.spans(template, trial, 0, text, session.injection)

    def ids(a: int, b: int) -> list[int]:
        return codec.encode(text[a:b], [(s - a, e - a) for s, e in spans if a <= s and e <= b], base=a)[0]

    head, tail = ids(0, keep), ids(keep, len(kept))
    full, anchor = codec.encode(text, spans)
    exact = held[: len(head)] == head and (not tail or held[-len(tail):] == tail) and full[: len(head) + len(tail)] == head + tail
    if not exact:
        return truncate(session, max_new_tokens, used, new, ": the kept tokens would split differently")
    _drop(session, first, cut)
    delta = Delta(
        text[len(kept):],
        token_ids=full[len(head) + len(tail):],
        dropped=cut - first,
        discard=(len(head), len(held) - len(head) - len(tail)),
        reason=f"shifted out the {cut - first} oldest messages to fit session_len {session.session_len}",
    )
    return _Plan(delta, offsets, 0, anchor=anchor or (0, 0), shift=(keep, resume))
