"""Bringing a resident sequence in line with a turn's request: what to keep, what to prefill."""
from __future__ import annotations

from ...errors import BackendError
from ..base import GenerationRequest
from .prefix import common_prefix
from .sequences import SequencePool, SessionState
from .vocab import LlamaVocab


def plan_turn(pool: SequencePool, state: SessionState, request: GenerationRequest, vocab: LlamaVocab,
              adopted: list[int] | None = None) -> list[int]:
    """Apply the delta's reset or discard to the sequence; the ids left to prefill.

    The cache only ever keeps what a fresh prefill of its ids computes
    (:attr:`SessionState.kept`): the last answer, decoded a token at a time,
    is prefilled again with the next turn's delta, so no answer depends on how
    its prompt got into the cache (measured on SmolLM2: logits after decoded
    tokens differ from a prefill's by up to 0.84, enough to flip a greedy
    choice; a prefill cut into chunks of two ids or more gives the same bits).

    O(turn) when the sequence holds what the session says the engine holds
    (``request.held`` equals its ids plus the one it sampled last without
    feeding it, the end marker or the last token of a cut answer): the last
    answer, that token, then the delta. A reset delta carries the whole
    prompt: the sequence keeps the exact prefix it shares with it (a history
    cut back, an edited message: only what follows the change is prefilled).
    Otherwise (a session evicted beyond the host budget, a stop string cut
    inside a token, a session new to this engine, or one without a tokenizer)
    the whole prompt is fetched (``request.prompt()``, O(history)), the
    longest prefix the sequence shares with it is kept and the rest
    prefilled. The engine may then start the sequence from a longer prefix
    held elsewhere (:mod:`.prefix`).

    ``adopted``: the turn's whole prompt, when the sequence holds another's ids (an orphan's, taken over):
    counts say nothing then (the session's ``held`` may equal them by chance), only ids do. The same once
    the engine applied a drift rewind itself (:attr:`SessionState.rewound`): the delta that discards that
    range is matched by ids; any other turn takes the whole prompt.
    """
    delta = request.delta
    rewound, state.rewound = state.rewound, None
    if rewound is not None and delta.discard == rewound and not delta.reset and adopted is None \
            and delta.token_ids is not None and request.held == rewound[0]:
        # the session's drift rewind, applied by this engine when the answer was committed: what the
        # sequence holds from there is (part of) the canonical ids the delta re-sends
        state.unfed = []
        target = state.ids[:rewound[0]] + list(delta.token_ids)
        keep = _keep(state.ids, target, state.kept)
        pool.truncate(state, keep)
        return _todo(pool, state, target)
    if delta.discard and not delta.reset and adopted is None:
        if rewound is None:
            pool.discard(state, *delta.discard)
        else:  # past the rewind the sequence no longer holds what the session counts on: cut, never shift
            pool.truncate(state, min(delta.discard[0], rewound[0]))
    unfed, state.unfed = state.unfed, []
    if adopted is not None:
        target = adopted
        keep = _keep(state.ids, target, state.exact)
    elif delta.token_ids is not None and delta.reset:
        target = list(delta.token_ids)
        shifted = delta.shiftable is not None and _shift(pool, state, target, *delta.shiftable)
        keep = _keep(state.ids, target, state.kept if shifted else state.exact)
    elif delta.token_ids is not None and request.held == len(state.ids) + len(unfed) and rewound is None:
        target = state.ids + unfed + list(delta.token_ids)
        keep = state.kept
    else:
        target = prompt_ids(request, vocab)
        keep = _keep(state.ids, target, state.kept)
    pool.truncate(state, keep)
    return _todo(pool, state, target)


def _shift(pool: SequencePool, state: SessionState, target: list[int], start: int, count: int) -> bool:
    """A reset's context shift (``Delta.shiftable``): when the sequence holds the prompt's first ``start`` ids, then
    ``count`` others, then more of the prompt, those ``count`` go (their keys after rotated, as for a shift delta: the
    session's accepted approximation, so only its own turns keep them) and the rest stays. False when it does not."""
    ids, end, held = state.ids, start + count, len(state.ids)
    if count <= 0 or end >= held or len(target) <= start or ids[end] != target[start] or ids[:start] != target[:start]:
        return False
    pool.discard(state, start, count)
    return len(state.ids) == held - count  # a memory that cannot shift cut the sequence at start instead


def _todo(pool: SequencePool, state: SessionState, target: list[int]) -> list[int]:
    todo = target[len(state.ids):]  # all of it if the memory could not be cut (recurrent models)
    if not todo and state.ids:  # nothing new: feed the last id again for its logits
        todo = [state.ids[-1]]
        pool.truncate(state, len(state.ids) - 1)
    if not todo:
        raise BackendError("an empty prompt: the request holds no token ids to generate from")
    return todo


def prompt_ids(request: GenerationRequest, vocab: LlamaVocab) -> list[int]:
    """The whole prompt of the turn as ids: the delta's when it is the whole prompt, else the session's
    context (a session without a tokenizer: its text encoded with special parsing on, as llama.cpp reads a
    prompt)."""
    delta = request.delta
    if delta.token_ids is not None and (delta.reset or request.held == 0):
        return list(delta.token_ids)
    prompt = request.prompt()
    return list(prompt.ids) if prompt.ids is not None else vocab.encode_parsed(prompt.text)


def _keep(held: list[int], ids: list[int], end: int | None = None) -> int:
    """Longest common prefix of ``held[:end]`` and ``ids``, never all of ``ids`` (its last id is fed again
    for the logits)."""
    limit = min(len(held) if end is None else end, len(ids) - 1)
    return common_prefix(held, ids, 0, limit) if limit > 0 else 0
