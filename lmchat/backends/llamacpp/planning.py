"""Bringing a resident sequence in line with a turn's request: what to keep, what to prefill."""
from __future__ import annotations

from ...errors import BackendError
from ..base import GenerationRequest
from .sequences import SequencePool, SessionState


def plan_turn(pool: SequencePool, state: SessionState, request: GenerationRequest, vocab) -> list[int]:
    """Bring the sequence in line with what the session says the engine holds; the ids left to prefill.

    Per-turn work is O(turn): the ids generated last turn are compared with
    the session's (``state.verified`` marks where checking starts), the end
    marker the model sampled but never fed comes from the request, and only
    a lost or diverged cache is rebuilt from ``request.full_ids()``.
    """
    delta = request.delta
    if request.context_ids is None:  # a session without a tokenizer: its whole text, encoded here
        target = vocab.encode_parsed(request.context)
        if delta.reset:
            pool.clear(state)
        keep = _common_prefix(state.ids, target)
        pool.truncate(state, keep)
        todo = target[keep:]
    elif delta.reset:
        pool.clear(state)
        todo = list(delta.token_ids or ())
    else:
        if delta.discard:
            pool.discard(state, *delta.discard)
        held = request.held
        limit = min(len(state.ids), held)
        context, k = request.context_ids, min(state.verified, limit)
        ids = state.ids
        while k < limit and ids[k] == context[k]:
            k += 1
        pool.truncate(state, k)
        todo = request.full_ids() if k == 0 else list(context[k:held]) + list(delta.token_ids or ())
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
