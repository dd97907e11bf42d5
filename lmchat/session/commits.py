"""The token ids of a committed answer: the engine's own, checked against the canonical encoding.

The answer's text goes into the context as the model wrote it; its ids are
the ids the engine generated (when given), compared with the canonical
encoding of the same text. When they differ (retokenization drift) the
session's ``drift`` policy decides what it holds from now on (see
docs/tokens.md): ``'rewind'`` keeps the canonical ids and has the next
delta drop the engine's from the first that differs, ``'reset'`` resends
the whole prompt next, ``'keep'`` goes on from the engine's ids.
"""
from __future__ import annotations

from .planning import Frame
from .state import Held

DRIFT_REASON = "the held ids differ from the canonical encoding of the answer (retokenization drift)"


def commit_ids(frame: Frame, held: Held, drift: str, answer: str, stop: str,
               token_ids: list[int] | None) -> tuple[int | None, tuple[int, int]]:
    """Append the answer's ids to ``held``; returns where they end before the stop, and the anchor there."""
    codec = frame.codec
    assert codec is not None  # called for a session with a tokenizer only (Session.commit)
    char0, id0 = held.anchor
    open_text = held.context_from(char0)  # held text after the last structural token
    text = open_text + answer + stop
    stop_at = len(open_text) + len(answer)
    # the answer's own output markup (tool-call markers, think tags) is markup, as the model wrote it
    spans = [(len(open_text) + a, len(open_text) + b)
             for a, b in codec.special_spans(answer, keep=codec.output_tokens(frame.template))]
    inner = codec.encode(open_text + answer, spans, base=char0)[1]  # the anchor before the stop
    before_stop = (char0 + inner[0], id0 + inner[1]) if inner else (char0, id0)
    special_stop = stop in codec.special
    spans += [(stop_at, len(text))] if special_stop else []
    ids, anchor = codec.encode(text, spans, base=char0)
    held_ids = held.ids[id0:]
    canonical = ids[len(held_ids):] if ids[: len(held_ids)] == held_ids else None
    stop_ids = [codec.special[stop]] if special_stop else codec.encode_text(stop, at_start=False)
    if token_ids is not None:
        new = [int(t) for t in token_ids] + stop_ids
    else:
        new = canonical if canonical is not None else codec.encode_text(answer, at_start=False) + stop_ids
    anchor = (char0 + anchor[0], id0 + anchor[1]) if anchor else held.anchor
    if new != canonical:
        new, anchor = _drifted(held, drift, new, canonical, anchor, char0 + len(text))
    start = len(held.ids)
    held.ids += new
    held.anchor = anchor
    # where the answer ends in the ids is exact when the stop is one marker id, or nothing
    ids_end = start + len(new) - len(stop_ids) if special_stop or not stop else None
    return ids_end, before_stop


def _drifted(held: Held, drift: str, new: list[int], canonical: list[int] | None, anchor: tuple[int, int],
             end: int) -> tuple[list[int], tuple[int, int]]:
    """The engine's ids differ from the canonical encoding: the ids to hold from now on, and the next anchor."""
    if drift == "keep":
        # token-in/token-out: the engine's own ids stay; the next delta is encoded after them
        return new, (end, len(held.ids) + len(new))
    if drift == "rewind" and canonical is not None:
        same = next((i for i, (a, b) in enumerate(zip(new, canonical, strict=False)) if a != b),
                    min(len(new), len(canonical)))
        held.rewind = (len(held.ids) + same, len(new) - same)
        return canonical, anchor
    held.needs_reset = True
    held.reset_reason = DRIFT_REASON
    return new, anchor
