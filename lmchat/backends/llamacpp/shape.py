"""The llama context an engine makes, as one record (:class:`ContextShape`)."""
from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_context_params


@attrs.frozen
class ContextShape:
    """``n_seq`` sequences sharing ``n_ctx`` tokens, computed by ``threads`` threads in micro-batches of ``n_batch``
    ids; a prompt is prefilled ``prefill_chunk`` ids a step while others decode. With the model, the fields but
    ``prefill_chunk`` decide which kernels a step takes (the start-up probe's key: probe.py)."""

    n_ctx: int
    n_seq: int
    threads: int
    n_batch: int = 512
    prefill_chunk: int = 256
    flash_attn: bool = False

    def params(self, L: ModuleType) -> llama_context_params:
        params: llama_context_params = L.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = params.n_ubatch = self.n_batch
        params.n_seq_max = self.n_seq
        params.n_threads = params.n_threads_batch = self.threads
        params.kv_unified = False  # a KV stream per sequence: attention reads only its own tokens
        params.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.flash_attn \
            else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.no_perf = True
        return params

    @property
    def kernels(self) -> tuple[int, int, int, int, bool]:
        """What of the shape decides the kernels a step takes."""
        return self.n_ctx, self.n_seq, self.threads, self.n_batch, self.flash_attn
