"""Next-token choice from logits: greedy, or sampling with temperature, top-k, top-p.

Done here, one token at a time, rather than through ``model.generate`` so the
backend keeps control of the KV cache, streams each token and checks stop
words and cancellation between tokens. Semantics follow transformers' logits
processors (repetition penalty, then temperature, top-k, top-p).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..base import SamplingParams


class Sampler:
    """Picks tokens for one answer; ``context_ids`` feed the repetition penalty."""

    def __init__(self, params: SamplingParams, context_ids: Sequence[int]):
        self.params = params
        self.generator = None
        if params.seed is not None:
            self.generator = torch.Generator().manual_seed(params.seed)
        self._context = context_ids
        self._seen: torch.Tensor | None = None  # vocabulary mask of ids already in the text

    def __call__(self, logits: torch.Tensor) -> int:
        p = self.params
        logits = logits.float()
        if p.repetition_penalty != 1.0:
            logits = self._penalize(logits)
        token = int(torch.argmax(logits)) if p.greedy else self._sample(logits / p.temperature)
        if self._seen is not None:
            self._seen[token] = True
        return token

    def _penalize(self, logits: torch.Tensor) -> torch.Tensor:
        # CTRL's penalty as transformers applies it: divide positive logits, multiply negative ones
        if self._seen is None:
            self._seen = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            if self._context:
                self._seen[torch.tensor(list(self._context), device=logits.device)] = True
        penalty = self.params.repetition_penalty
        scaled = torch.where(logits > 0, logits / penalty, logits * penalty)
        return torch.where(self._seen, scaled, logits)

    def _sample(self, logits: torch.Tensor) -> int:
        p = self.params
        if p.top_k and p.top_k < logits.shape[-1]:
            kth = torch.topk(logits, p.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if p.top_p is not None and p.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            # drop a token once the more likely ones already cover top_p (the most likely one always stays)
            drop = torch.cumsum(probs, dim=-1) - probs > p.top_p
            logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))
