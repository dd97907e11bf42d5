"""Bringing a resident sequence in line with a turn's request: what to keep, what to prefill."""
from __future__ import annotations

from ...errors import BackendError
from ..base import GenerationRequest
from .sequences import SequencePool, SessionState


def plan_turn(pool: SequencePool, state: SessionState, request: GenerationRequest, vocab) -> list[int]:
    """Apply the delta's reset or discard to the sequence; the ids left to prefill.

    O(turn) when the sequence holds what the session says the engine holds
    (``request.held`` equals its ids plus the one it sampled last without
    feeding it, the end marker or the last token of a cut answer): that token,
    then the delta. Otherwise (a session evicted beyond the host budget and
    dropped, a stop string cut inside a token, a session new to this engine,
    or one without a tokenizer) the whole prompt is fetched
    (``request.prompt()``, O(history)), the longest prefix the sequence shares
    with it is kept and the rest prefilled.
    """
    delta = request.delta
    if delta.reset:
        pool.clear(state)
    elif delta.discard:
        pool.discard(state, *delta.discard)
    unfed, state.unfed = state.unfed, []
    if delta.token_ids is not None and (delta.reset or request.held == len(state.ids) + len(unfed)):
        todo = ([] if delta.reset else unfed) + list(delta.token_ids)
    else:
        prompt = request.prompt()
        # a session without a tokenizer: its text encoded with special parsing on, as llama.cpp reads a prompt
        target = list(prompt.ids) if prompt.ids is not None else vocab.encode_parsed(prompt.text)
        keep = _common_prefix(state.ids, target)
        pool.truncate(state, keep)
        todo = target[keep:]
    if not todo and state.ids:  # nothing new: feed the last id again for its logits
        todo = [state.ids[-1]]
        pool.truncate(state, len(state.ids) - 1)
    if not todo:
        raise BackendError("an empty prompt: the request holds no token ids to generate from")
    return todo


def _common_prefix(held: list[int], ids: list[int]) -> int:
    """Longest common prefix, never all of ``ids`` (its last id is fed again for the logits)."""
    n = min(len(held), len(ids) - 1)
    if n <= 0:
        return 0
    if held[:n] == ids[:n]:
        return n
    return next(i for i in range(n) if held[i] != ids[i])
