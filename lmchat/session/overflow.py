"""Overflow policies: what a session does when a turn would not fit in ``session_len``.

* ``'error'`` (the default) raises :class:`~lmchat.errors.SessionLengthExceeded`.
* ``'truncate'`` drops the oldest whole exchanges (a user message and everything
  up to the next one), keeps the system prompt, and returns a reset delta.
* ``'shift'`` (token sessions) drops the same exchanges *inside* the engine's cache: the delta
  carries ``discard=(start, count)``, the token range the engine removes before
  appending the delta (llama.cpp's context shift), so the system prompt and the
  latest turns are not prefilled again. It is used only when the shifted
  context is exactly the canonical prompt of the remaining conversation;
  otherwise the session falls back to ``'truncate'`` and says so.

``d.removed`` holds the messages removed (``d.dropped`` counts them) and
``d.reason`` says why: nothing is ever dropped silently.
"""
from __future__ import annotations

from typing import Any

import attrs

from ..errors import SessionLengthExceeded
from ..templates.chat import Chat
from .planning import Frame, full_plan
from .state import Delta, Held, Plan
from .tokens import encode_prompt

POLICIES = ("error", "truncate", "shift")


@attrs.frozen
class Budget:
    """The limits a turn must fit in: ``used + new + max_new_tokens <= session_len``."""

    session_len: int
    max_new_tokens: int
    policy: str
    turn_start: int  # the new turn's first message: it is always kept
    unit: str = "tokens"  # or "characters", for a session without a tokenizer


def fit(frame: Frame, held: Held, plan: Plan, budget: Budget) -> Plan:
    """``plan``, or the plan the overflow policy makes of it when the turn does not fit."""
    tokens = frame.codec is not None
    size = len(held.ids) if tokens else held.length
    used = 0 if plan.full else plan.delta.discard[0] if plan.delta.discard else size
    if tokens:
        assert plan.delta.token_ids is not None  # a plan made with a codec carries its ids
        new = len(plan.delta.token_ids)
    else:
        new = len(plan.delta.text)
    if used + new + budget.max_new_tokens <= budget.session_len:
        return plan
    if budget.policy == "shift" and tokens and not plan.full and held.rewind is None:
        return shift(frame, held, budget, used, new)
    if budget.policy in ("truncate", "shift"):  # a reset has nothing in the cache to shift
        return truncate(frame, held, budget, used, new)
    raise SessionLengthExceeded(used=used, new=new, max_new_tokens=budget.max_new_tokens, limit=budget.session_len,
                                unit=budget.unit)


def _cut(frame: Frame, budget: Budget, used: int, new: int) -> tuple[int, int]:
    """(first kept non-system index, first kept index): the fewest oldest exchanges to drop."""
    chat = frame.chat
    messages = chat.messages
    first = 1 if messages and messages[0]["role"] == "system" else 0
    cuts = [j for j in range(first + 1, budget.turn_start + 1) if messages[j]["role"] == "user"] or [budget.turn_start]

    def size(cut: int) -> int:
        trial = Chat(messages[:first] + messages[cut:], tools=chat.tools, date=chat.date, kwargs=chat.kwargs)
        if frame.codec is None:  # a session without a tokenizer counts characters
            frame.template.check(trial)
            return len(frame.template.render_window(trial, 0)[0])
        return len(encode_prompt(frame.template, trial, frame.codec, frame.injection)[1])

    # fewer messages never render longer, so the smallest cut that fits is found by bisection
    limit = budget.session_len - budget.max_new_tokens
    lo, hi = 0, len(cuts) - 1
    if size(cuts[hi]) > limit:
        raise SessionLengthExceeded(used=used, new=new, max_new_tokens=budget.max_new_tokens, limit=budget.session_len,
                                unit=budget.unit)
    while lo < hi:
        mid = (lo + hi) // 2
        if size(cuts[mid]) <= limit:
            hi = mid
        else:
            lo = mid + 1
    return first, cuts[lo]


def _drop(chat: Chat, first: int, cut: int) -> tuple[dict[str, Any], ...]:
    """Remove messages ``[first:cut]``; they are returned, for the delta to say what went."""
    removed = tuple(chat.messages[first:cut])
    del chat.messages[first:cut]
    chat.forget_rounds()
    return removed


def truncate(frame: Frame, held: Held, budget: Budget, used: int, new: int, why: str = "") -> Plan:
    first, cut = _cut(frame, budget, used, new)
    removed = _drop(frame.chat, first, cut)
    fresh = Held(needs_reset=bool(held.parts) or held.needs_reset)  # the offsets no longer apply
    plan = full_plan(frame, fresh, f"dropped the {cut - first} oldest messages to fit session_len "
                                   f"{budget.session_len}{why}")
    plan.delta = attrs.evolve(plan.delta, removed=removed, removed_at=first)
    return plan


def shift(frame: Frame, held: Held, budget: Budget, used: int, new: int) -> Plan:
    first, cut = _cut(frame, budget, used, new)
    chat, codec, template = frame.chat, frame.codec, frame.template
    context, ids_held = held.context, held.ids
    keep = held.offsets[first] if first < len(held.offsets) else len(context)
    resume = held.offsets[cut] if cut < held.rendered else len(context)
    trial = Chat(chat.messages[:first] + chat.messages[cut:], tools=chat.tools, date=chat.date, kwargs=chat.kwargs)
    template.check(trial)
    text, offsets = template.render_window(trial, 0)
    kept = context[:keep] + context[resume:]
    if not text.startswith(kept):
        return truncate(frame, held, budget, used, new, ": the remaining turns render differently")
    spans = codec.spans(template, trial, 0, text, frame.injection)

    def ids(a: int, b: int) -> list[int]:
        encoded: list[int] = codec.encode(text[a:b], [(s - a, e - a) for s, e in spans if a <= s and e <= b], base=a)[0]
        return encoded

    head, tail = ids(0, keep), ids(keep, len(kept))
    full, anchor = codec.encode(text, spans)
    exact = (ids_held[: len(head)] == head and (not tail or ids_held[-len(tail):] == tail)
             and full[: len(head) + len(tail)] == head + tail)
    if not exact:
        return truncate(frame, held, budget, used, new, ": the kept tokens would split differently")
    removed = _drop(chat, first, cut)
    delta = Delta(
        text[len(kept):],
        token_ids=full[len(head) + len(tail):],
        removed=removed,
        removed_at=first,
        discard=(len(head), len(ids_held) - len(head) - len(tail)),
        reason=f"shifted out the {cut - first} oldest messages to fit session_len {budget.session_len}",
    )
    return Plan(delta, offsets, 0, anchor=anchor or (0, 0), shift=(keep, resume))
