"""A llama.cpp sampler chain from :class:`SamplingParams`, one per answer.

Order and semantics follow transformers' logits processors, as the embedded
backend does: repetition penalty (CTRL's: positive logits divided, negative
multiplied, once per distinct id of the context and the answer so far), then
temperature, top-k, top-p, and a draw (``seed`` makes it reproducible).
``temperature <= 0`` is greedy (after the penalty). The penalty window is the
whole context: the chain is primed with the ids the sequence holds.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..base import SamplingParams
from ._lib import lib


class Sampler:
    """Owns a ``llama_sampler`` chain; :meth:`free` releases it (the scheduler calls it when the answer ends)."""

    def __init__(self, params: SamplingParams, n_vocab: int, context: Sequence[int]):
        L = self._L = lib()
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        self._chain = chain
        if params.repetition_penalty != 1.0:
            window = len(context) + params.max_new_tokens
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_penalties(
                n_vocab, window, float(params.repetition_penalty), 0.0, 0.0))
            for token in context:  # the penalty applies to the whole context, as transformers' does
                L.llama_sampler_accept(chain, token)
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

    def sample(self, ctx, index: int) -> int:
        """The next id from the logits of batch position ``index`` (the chain records it for the penalty)."""
        return int(self._L.llama_sampler_sample(self._chain, ctx, index))

    def free(self) -> None:
        if self._chain is not None:
            self._L.llama_sampler_free(self._chain)
            self._chain = None
