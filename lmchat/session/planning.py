"""Computing the next delta, without touching the session: the O(turn) re-render and its prefix check.

Only the pieces from ``template.rerender_from`` on are rendered, and compared
with the matching tail of the held context. When they do not extend it (the
template rewrote history, or the new turn changes how held tokens split) the
plan is a reset carrying the full prompt, with the reason.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..templates.base import BaseTemplate
from ..templates.chat import Chat
from .state import Delta, Held, Plan

if TYPE_CHECKING:
    from .tokens import TokenCodec


@attrs.frozen
class Frame:
    """What a plan reads besides the held state: the template, the conversation, the codec, the policy."""

    template: BaseTemplate
    chat: Chat
    codec: TokenCodec | None  # None for a text-only session
    injection: str


def next_plan(frame: Frame, held: Held) -> Plan:
    """The next delta and the state it leads to."""
    chat, template = frame.chat, frame.template
    if held.needs_reset or not held.parts:
        return full_plan(frame, held, held.reset_reason or ("reset requested" if held.needs_reset else None))
    k = template.rerender_from(chat, held.rendered)
    if k <= 0:
        template.check(chat)
        start = 0
    else:
        start = held.offsets[k] if k < len(held.offsets) else held.tail
    text, offsets = template.render_window(chat, k)
    kept = held.context_from(start)
    if not text.startswith(kept):
        return full_plan(frame, held, divergence(kept, text, start), (text, offsets) if k <= 0 else None)
    plan = Plan(Delta(text[len(kept):]), [start + o for o in offsets], max(k, 0))
    if frame.codec is not None and not _with_ids(frame, held, plan, text, len(kept)):
        return full_plan(frame, held, "the new turn changes how the held tokens split (token boundary)")
    if held.rewind is not None:
        start, count = held.rewind
        assert plan.delta.token_ids is not None  # a rewind is held with a codec only: _with_ids set them
        plan.delta = attrs.evolve(
            plan.delta, token_ids=held.ids[start:] + plan.delta.token_ids, discard=(start, count),
            reason=f"the engine's ids of the last answer differ from its canonical encoding from token {start} "
                   f"on (retokenization drift): {count} ids dropped from its cache, "
                   f"{len(held.ids) - start} canonical ids sent instead",
        )
    return plan


def _with_ids(frame: Frame, held: Held, plan: Plan, window: str, kept: int) -> bool:
    """Give an extending plan its token ids; False when the held ids are not a prefix of them."""
    codec = frame.codec
    assert codec is not None  # next_plan gives a plan ids only with a codec
    spans = codec.spans(frame.template, frame.chat, plan.window, window, frame.injection)
    if any(a < kept < b for a, b in spans):
        return False
    char0, id0 = held.anchor
    lead = held.context_from(char0)  # held text after the last structural token
    shift = len(lead) - kept
    tail_spans = [(a + shift, b + shift) for a, b in spans if a >= kept]
    ids, anchor = codec.encode(lead + plan.delta.text, tail_spans, base=char0)
    held_ids = held.ids[id0:]
    if ids[: len(held_ids)] != held_ids:
        return False
    plan.delta = attrs.evolve(plan.delta, token_ids=ids[len(held_ids):])
    plan.anchor = (char0 + anchor[0], id0 + anchor[1]) if anchor else held.anchor
    return True


def full_plan(frame: Frame, held: Held, reason: str | None, rendered: tuple[str, list[int]] | None = None) -> Plan:
    """A plan that carries the whole prompt (a reset when the engine holds something)."""
    if rendered is None:
        frame.template.check(frame.chat)
        rendered = frame.template.render_window(frame.chat, 0)
    text, offsets = rendered
    holding = bool(held.parts) or held.needs_reset
    delta = Delta(text, reset=holding, sequence_start=True, reason=reason if holding else None)
    plan = Plan(delta, offsets, 0, full=True)
    if frame.codec is not None:
        spans = frame.codec.spans(frame.template, frame.chat, 0, text, frame.injection)
        ids, anchor = frame.codec.encode(text, spans)
        plan.delta = attrs.evolve(delta, token_ids=ids)
        plan.anchor = anchor or (0, 0)
    return plan


def divergence(held: str, text: str, base: int) -> str:
    """Where the held context and the new rendering part, for a reset's reason."""
    i = next((j for j, (a, b) in enumerate(zip(held, text, strict=False)) if a != b), min(len(held), len(text)))
    return (
        f"the template renders earlier turns differently at context offset {base + i}: "
        f"held {held[i:i + 24]!r}, now {text[i:i + 24]!r}"
    )
