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

Both drop more than the turn needs: enough that ``room`` (the session's
``overflow_room``, a share of ``session_len``) is free once the turn's answer
is reserved, so the turns that follow extend what the engine holds again. A
policy that dropped only what each turn needs would drop again at every later
turn, and each drop changes the prompt from the system prompt on: the engine
computes everything after it again (a shift's rotated keys are not what a
prefill computes, and the llama.cpp engine keeps only what a prefill computes).

``d.removed`` holds the messages removed (``d.dropped`` counts them) and
``d.reason`` says why: nothing is ever dropped silently. The session keeps them
(:attr:`~lmchat.session.Session.earlier`): only the engine stops seeing them.
"""
from __future__ import annotations

import attrs

from ..errors import ConfigError, SessionLengthExceeded
from ..messages import Message
from ..templates.chat import Chat
from .planning import Frame, full_plan
from .state import Delta, Held, Plan
from .tokens import encode_prompt

POLICIES = ("error", "truncate", "shift")
#: the share of ``session_len`` a drop leaves free for the turns after it, unless a session says otherwise (llama.cpp's
#: and Ollama's context shifts free half of what they may drop: a quarter keeps more of the conversation in view)
ROOM = 0.25


def check_room(room: float) -> float:
    """``room`` when it is a share of the context a drop can leave free (0 <= room < 1); else a ConfigError."""
    if isinstance(room, bool) or not isinstance(room, (int, float)) or not 0 <= room < 1:
        raise ConfigError(f"must be a number from 0 (drop only what the turn needs) to below 1, got {room!r}",
                          field="overflow_room")
    return float(room)


@attrs.frozen
class Budget:
    """The limits a turn must fit in: ``used + new + max_new_tokens <= session_len``."""

    session_len: int
    max_new_tokens: int
    policy: str
    turn_start: int  # the new turn's first message: it is always kept
    unit: str = "tokens"  # or "characters", for a session without a tokenizer
    room: int = 0  # what a drop leaves free beyond the turn and its answer, for the turns after it


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
    if budget.policy == "shift" and tokens and not plan.full:  # a drift rewind is pending
        return drifted_shift(frame, held, budget, used, new)
    if budget.policy in ("truncate", "shift"):  # a reset has nothing in the cache to shift
        return truncate(frame, held, budget, used, new)
    raise SessionLengthExceeded(used=used, new=new, max_new_tokens=budget.max_new_tokens, limit=budget.session_len,
                                unit=budget.unit)


def _cut(frame: Frame, budget: Budget, used: int, new: int) -> tuple[int, int]:
    """(first kept non-system index, first kept index): the fewest oldest exchanges to drop that leave
    ``budget.room`` free, else (the turn itself is that long) all the exchanges before the turn."""
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

    # fewer messages never render longer, so the smallest cut that leaves the room is found by bisection
    limit = budget.session_len - budget.max_new_tokens
    lo, hi = 0, len(cuts) - 1
    least = size(cuts[hi])
    if least > limit:
        raise SessionLengthExceeded(used=used, new=new, max_new_tokens=budget.max_new_tokens, limit=budget.session_len,
                                unit=budget.unit)
    target = limit - budget.room
    if least > target:
        return first, cuts[hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if size(cuts[mid]) <= target:
            hi = mid
        else:
            lo = mid + 1
    return first, cuts[lo]


def _drop(chat: Chat, first: int, cut: int) -> tuple[Message, ...]:
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
    assert codec is not None  # a shift keeps token ids: fit() shifts only a session with a tokenizer
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


def drifted_shift(frame: Frame, held: Held, budget: Budget, used: int, new: int) -> Plan:
    """A shift when the engine's ids of the last answer drifted from their canonical encoding (a rewind pending):
    one delta cannot discard both the shifted turns and the drifted answer, so it is a reset carrying the whole
    prompt, which names the shift (``Delta.shiftable``) for an engine that can apply it and keep the rest."""
    plan = shift(frame, held, budget, used, new)
    if plan.shift is None:  # shift() fell back to truncate: nothing to name
        return plan
    removed, discard = plan.delta.removed, plan.delta.discard
    why = (f"shifted out the {len(removed)} oldest messages to fit session_len {budget.session_len}; the engine's "
           "ids of the last answer are not its canonical encoding (retokenization drift), so the whole prompt is "
           "sent, and the engine may shift its cache instead of computing it again")
    full = full_plan(frame, Held(needs_reset=True), why)
    full.delta = attrs.evolve(full.delta, removed=removed, removed_at=plan.delta.removed_at, shiftable=discard)
    return full
