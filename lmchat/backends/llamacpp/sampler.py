"""A llama.cpp sampler chain from :class:`SamplingParams`, one per answer.

Order and semantics follow transformers' logits processors, as the embedded
backend does: repetition penalty (CTRL's: positive logits divided, negative
multiplied, once per distinct id of the context and the answer so far), then
temperature, top-k, top-p, and a draw (``seed`` makes it reproducible).
``temperature <= 0`` is greedy (after the penalty). The penalty window is the
whole context: the chain is primed with the ids the sequence holds.

A constraint (:mod:`.grammars`, an llguidance matcher) is kept beside the
chain, as llama.cpp's own ``common_sampler`` keeps its grammar: the chain
picks a token, the matcher checks that one token, and only when it refuses
are the logits masked to what it allows and the chain run again. Masking the
whole vocabulary at every step made answers 2-3x slower; the check costs one
token. Either way the token is the chain's draw from the logits the
constraint allows.
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...stops import StopMatcher
from ..base import SamplingParams
from ._lib import lib
from .grammars import Grammars, advance
from .vocab import LlamaVocab

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_context_p
    from llguidance import LLMatcher

class Sampler:
    """Owns a ``llama_sampler`` chain; :meth:`free` releases it (the scheduler calls it when the answer ends)."""

    def __init__(self, params: SamplingParams, n_vocab: int, context: Sequence[int],
                 guide: LLMatcher | None = None) -> None:
        L = self._L = lib()
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        self._chain = chain
        if params.repetition_penalty != 1.0:
            window = len(context) + params.max_new_tokens
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_penalties(
                n_vocab, window, float(params.repetition_penalty), 0.0, 0.0))
            for token in context:  # the penalty applies to the whole context, as transformers' does
                L.llama_sampler_accept(chain, token)
        self._guide = guide  # an llguidance matcher, or None
        self._n_vocab = n_vocab
        self._cells: Any = None  # the candidates' ctypes array, allocated at the first constrained draw
        if params.greedy:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
            return
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(float(params.temperature)))
        if params.top_k and 0 < params.top_k < n_vocab:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(int(params.top_k)))
        if params.top_p is not None and params.top_p < 1.0:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(float(params.top_p), 1))
        seed = L.LLAMA_DEFAULT_SEED if params.seed is None else int(params.seed) & 0xFFFFFFFF
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(seed))

    def sample(self, ctx: llama_context_p, index: int) -> int:
        """The next id from the logits of batch position ``index`` (the chain records it for the penalty)."""
        if self._guide is None:
            return int(self._L.llama_sampler_sample(self._chain, ctx, index))
        logits = self._L.llama_get_logits_ith(ctx, index)
        token = self._draw(logits, constrained=False)
        if self._guide.validate_tokens([token]) != 1:  # refused: draw again from what the constraint allows
            token = self._draw(logits, constrained=True)
        self._guide.consume_token(token)
        self._L.llama_sampler_accept(self._chain, token)
        return token

    def _draw(self, logits: ctypes._Pointer[ctypes.c_float], constrained: bool) -> int:
        """What ``llama_sampler_sample`` does, without recording the token (the constraint checks it first)."""
        import numpy as np  # llama-cpp-python's own dependency

        L, n = self._L, self._n_vocab
        if self._cells is None:
            self._cells = (L.llama_token_data * n)()
            self._view = np.frombuffer(self._cells, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
            self._ids = np.arange(n, dtype=np.int32)
            self._mask = np.zeros((n + 31) // 32, dtype=np.int32)
        view = self._view
        view["id"] = self._ids  # top-k and top-p reorder the array: every field is written again
        view["logit"] = np.ctypeslib.as_array(logits, (n,))
        view["p"] = 0.0
        if constrained:
            assert self._guide is not None, "only a guided sampler draws constrained"
            self._guide.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
            allowed = np.unpackbits(self._mask.view(np.uint8), bitorder="little")[:n]
            view["logit"][allowed == 0] = -np.inf
        array = L.llama_token_data_array(self._cells, n, -1, False)
        L.llama_sampler_apply(self._chain, ctypes.byref(array))
        return int(array.data[array.selected].id)

    def free(self) -> None:
        if self._chain is not None:
            self._L.llama_sampler_free(self._chain)
            self._chain = None


def answer_sampling(params: SamplingParams, vocab: LlamaVocab, grammars: Grammars,
                    context: Sequence[int]) -> tuple[StopMatcher, Sampler]:
    """What an answer needs to be sampled and to end: its stop matcher (the request's stops, and the model's end
    ids and stop words that are its added tokens) and its sampler (primed with ``context``, the ids the sequence
    will hold, where a repetition penalty reads them; its constraint's matcher past what the constraint wrote).
    Raises :class:`~lmchat.errors.ConstraintUnsupported` for a grammar that does not compile."""
    stop_ids = set(vocab.eog_ids)
    stop_ids.update(vocab.added[w] for w in params.stop if w in vocab.added)
    guide = None if params.constraint is None else grammars.matcher(params.constraint)
    if guide is not None and params.constraint is not None and params.constraint.written:
        advance(guide, vocab.encode_plain(params.constraint.written))
    penalized = context if params.repetition_penalty != 1.0 else ()
    return StopMatcher(params.stop, stop_ids=stop_ids), Sampler(params, vocab.n_tokens, penalized, guide)
