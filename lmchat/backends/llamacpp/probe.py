"""Which ``llama_decode`` step sizes compute what a prefill computes, checked on the loaded model at start-up.

llama.cpp's attention multiplies each sequence's queries by its keys with one
matrix product per sequence (KQ, then KQV). With llamafile's sgemm built in
(the default), a product of two or more query rows goes to tinyBLAS and one of
a single row falls back to ggml's own ``vec_dot`` (``llamafile_sgemm``
returns false for ``n < 2``), which adds in another order: the scores of a
sequence fed one row per call differ from a prefill's in the last bits, and
that flips a greedy near-tie now and then (measured on the bundled SmolLM2:
logits up to 0.54 apart after 20 one-row steps; the first differing tensor
is layer 0's ``kq``). What counts is the rows *of one sequence* in a
micro-batch: several sessions decoding together, one row each, are as
inexact as one session alone. Whether a given GGUF, build, thread count or
CPU has the difference is measured here rather than assumed.

A prompt is prefilled in chunks (``prefill_chunk``; a cached prefix is
extended by what is new), so a chunk must compute what one batch of the
whole computes too. It does without flash attention; with it, llama.cpp's
CPU kernel takes a tiled path for many query rows, and a 64-id prompt fed
as two halves ends on logits 0.48 apart from one batch of it (measured on
SmolLM2): neither rows nor settling can make that exact. The probe checks
chunks on a prompt long enough to take that path. llama.cpp's flash attention
also splits a long context (512 cells or more) over the threads for a single
query row, so where it runs, one-row and paired steps are checked again after
a 512-id prefix. ``scripts/install-engine``'s build computes flash attention
one row at a time over the cells in order (scripts/flash-attn-rowwise.patch),
and every check then passes.
"""
from __future__ import annotations

import itertools
import logging
import math
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .probecache import open_cache, probe_key

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_context_p

log = logging.getLogger("lmchat.llamacpp")

#: when the engine prefills decoded ids again (steps.py): "auto" where the probe finds its steps inexact, "always"
#: whatever it finds (the rule before the probe existed: tests of settling itself, and a build the probe misjudges)
Settle = Literal["auto", "always"]

#: ids prefilled before the stepped part, then ids fed in steps: enough positions that a one-row difference
#: shows (on SmolLM2 one position in four or five differs, and a difference in the cache carries on to the
#: later positions), few enough for a short start (24 one-id steps)
PREFIX, STEPPED = 4, 12
#: the prompt fed whole, in halves and all but its last two ids then those: longer than a tile of many rows
#: (64 ids differed in halves under flash attention, 40 did not)
CHUNKED = 96
#: flash attention only: the prefix after which steps are checked again, at llama.cpp's threshold for splitting
#: one row's context over the threads (``nek1 >= 512`` in ggml-cpu's ops.cpp), and the ids stepped after it
LONG_PREFIX, LONG_STEPPED = 512, 4


@attrs.frozen
class StepProbe:
    """The probe's answer: whether one-row steps, and two-row steps as the engine pairs rows (the previous id
    computed again beside the new one), give a prefill's logits bit for bit; ``max_diff``: the largest
    difference of one-row steps."""

    one_row_exact: bool
    two_row_exact: bool
    max_diff: float
    #: a prompt fed in chunks gives the logits one batch of it gives (see the module docstring)
    chunks_exact: bool = True
    #: read from the user's cache, where an earlier process kept what it measured (probecache.py)
    kept: bool = False

    @property
    def pair_rows(self) -> bool:
        """The engine's rule: two rows per sequence where one row is inexact and two are exact. Where even two
        rows differ (Gemma 3 270M Q4_K_M here), or chunks do, pairing would cost without making anything exact:
        not done."""
        return self.chunks_exact and not self.one_row_exact and self.two_row_exact

    @property
    def exact_steps(self) -> bool:
        """Whether the engine's decoding steps (one row, or paired rows where :attr:`pair_rows`) compute the keys
        and values a prefill computes: then a decoded answer needs no second prefill (steps.py's settling)."""
        return self.chunks_exact and (self.one_row_exact or self.pair_rows)

    def as_stats(self) -> dict[str, Any]:
        return {"one_row_exact": self.one_row_exact, "two_row_exact": self.two_row_exact,
                "one_row_max_diff": self.max_diff, "chunks_exact": self.chunks_exact, "pair_rows": self.pair_rows,
                "exact_steps": self.exact_steps, "kept": self.kept}


#: the probes this process measured or read, by what decides the kernels a step takes (the model's tensors and
#: types, the context's shape, threads, batch and attention): a test suite or a server that opens the same model
#: again does not look again
_MEASURED: dict[tuple[Any, ...], StepProbe] = {}


def probe_steps(L: ModuleType, ctx: llama_context_p, batch: Any, mem: Any, n_vocab: int, seq: int,
                shape: tuple[Any, ...] | None = None, *, long_context: bool = False) -> StepProbe:
    """Feed the same ids to sequence ``seq`` (empty, and left empty) as one prefill, in one-row steps and in
    paired steps, and compare the logits of every stepped position bit for bit, and with ``long_context`` (flash
    attention; the sequence must hold 516 ids and a batch 512) once more after a 512-id prefix; once per
    ``shape`` in a process, and kept between processes in the user's cache (probecache.py; None: measured every
    time)."""
    if shape is None:
        return _measure(L, ctx, batch, mem, n_vocab, seq, long_context)
    shape = (*shape, long_context)
    if shape in _MEASURED:
        return _MEASURED[shape]
    cache = open_cache()
    key = probe_key(L, shape) if cache is not None else None
    try:
        kept = cache.get(key) if cache is not None and key is not None else None
        result = _from_kept(kept) if kept is not None else None
        if result is None:
            result = _measure(L, ctx, batch, mem, n_vocab, seq, long_context)
            if cache is not None and key is not None and not math.isnan(result.max_diff):  # NaN: not measured
                cache.put(key, _kept(result))
        else:
            log.info("llama.cpp step probe: %s (measured before on this model, build and CPU: %s)",
                     _verdict(result), cache.root if cache is not None else "")
    finally:
        if cache is not None:
            cache.close()
    _MEASURED[shape] = result
    return result


def _kept(probe: StepProbe) -> dict[str, object]:
    return {"one_row_exact": probe.one_row_exact, "two_row_exact": probe.two_row_exact,
            "max_diff": probe.max_diff, "chunks_exact": probe.chunks_exact}


def _from_kept(answer: dict[str, object]) -> StepProbe | None:
    flags = [answer.get(k) for k in ("one_row_exact", "two_row_exact", "chunks_exact")]
    diff = answer.get("max_diff")
    if not all(isinstance(f, bool) for f in flags) or not isinstance(diff, float):
        log.info("llama.cpp step probe: a kept answer of the wrong shape (%s); measuring again", answer)
        return None
    one, two, chunks = (bool(f) for f in flags)
    return StepProbe(one_row_exact=one, two_row_exact=two, max_diff=diff, chunks_exact=chunks, kept=True)


def _verdict(result: StepProbe) -> str:
    return ("one-row steps {} a prefill's logits (max difference {:.3g}), two-row steps {}{}".format(
        "give" if result.one_row_exact else "do not give", result.max_diff,
        "do" if result.two_row_exact else "do not",
        ": every sequence gets two rows per llama_decode (llamafile's sgemm in this build; scripts/install-engine "
        "installs one that decodes one exact row instead, faster: docs/backends.md)"
        if result.pair_rows else ""))


def _measure(L: ModuleType, ctx: llama_context_p, batch: Any, mem: Any, n_vocab: int, seq: int,
             long_context: bool = False) -> StepProbe:
    import numpy as np

    n = PREFIX + STEPPED
    ids = [(7 + 7919 * i) % n_vocab for i in range(n)]  # any ids: only the arithmetic is compared

    def run(rows: list[tuple[int, int, bool]]) -> list[Any]:
        for i, (token, pos, logits) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.seq_id[i][0], batch.logits[i] = token, pos, seq, logits
        batch.n_tokens = len(rows)
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed in the start-up probe")
        return [np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
                for i, (_, _, logits) in enumerate(rows) if logits]

    def stepped(pair: bool, ids: list[int] = ids, prefix: int = PREFIX, fresh: bool = True) -> list[Any]:
        """The logits of ``ids[prefix:]`` fed one step each after the prefix, prefilled now (``fresh``) or
        kept from the step before."""
        if fresh:
            L.llama_memory_seq_rm(mem, seq, -1, -1)
            run([(ids[p], p, False) for p in range(prefix)])
        out: list[Any] = []
        for p in range(prefix, len(ids)):
            first = p - 1 if pair else p  # the engine's paired row: the previous id computed again
            if not L.llama_memory_seq_rm(mem, seq, first, -1):
                raise RuntimeError("the memory cannot cut a sequence (a recurrent model): nothing to pair")
            out += run([(ids[q], q, q == p) for q in range(first, p + 1)])
        return out

    def far_steps() -> tuple[list[Any], list[Any], list[Any]]:
        """After one batch of :data:`LONG_PREFIX` ids, kept: the next ids as one batch (the reference: a prompt
        fed in chunks is checked to compute what one batch does), in one-row steps and in paired steps (their
        first step cuts the prefix's last cell and computes it again, as the engine does)."""
        far = [(5 + 65537 * i) % n_vocab for i in range(LONG_PREFIX + LONG_STEPPED)]
        L.llama_memory_seq_rm(mem, seq, -1, -1)
        run([(far[p], p, False) for p in range(LONG_PREFIX)])
        reference = run([(far[p], p, True) for p in range(LONG_PREFIX, len(far))])
        return reference, stepped(False, far, LONG_PREFIX, fresh=False), stepped(True, far, LONG_PREFIX, fresh=False)

    def chunked(cuts: list[int]) -> Any:
        """The last logits of :data:`CHUNKED` ids fed in batches that end at ``cuts``."""
        L.llama_memory_seq_rm(mem, seq, -1, -1)
        long = [(7 + 104729 * i) % n_vocab for i in range(CHUNKED)]
        out: list[Any] = []
        for start, end in itertools.pairwise([0, *cuts]):
            out = run([(long[p], p, p == CHUNKED - 1) for p in range(start, end)])
        return out[0]

    try:
        L.llama_memory_seq_rm(mem, seq, -1, -1)
        reference = run([(ids[p], p, p >= PREFIX) for p in range(n)])
        one, two = stepped(False), stepped(True)
        if long_context:  # compared as if they were more stepped positions of the short feed
            far_reference, far_one, far_two = far_steps()
            reference, one, two = reference + far_reference, one + far_one, two + far_two
        whole = chunked([CHUNKED])
        chunks_exact = all(np.array_equal(whole, chunked(cuts)) for cuts in ([CHUNKED // 2, CHUNKED],
                                                                              [CHUNKED - 2, CHUNKED]))
    except RuntimeError as exc:  # the engine then decodes as it always did: one row per sequence
        log.warning("llama.cpp step probe: not measured (%s); one row per sequence", exc)
        return StepProbe(one_row_exact=False, two_row_exact=False, max_diff=float("nan"))
    finally:
        L.llama_memory_seq_rm(mem, seq, -1, -1)

    def equal(out: list[Any]) -> bool:
        return all(np.array_equal(a, b) for a, b in zip(out, reference, strict=True))

    result = StepProbe(one_row_exact=equal(one), two_row_exact=equal(two),
                       max_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(one, reference, strict=True)),
                       chunks_exact=chunks_exact)
    log.info("llama.cpp step probe: %s", _verdict(result))
    if not result.chunks_exact:
        log.warning("llama.cpp step probe: a prompt fed in chunks does not compute what one batch of it computes "
                    "(flash attention on the CPU?); greedy answers may depend on batching and caching "
                    "(docs/backends.md)")
    elif not result.two_row_exact and not result.one_row_exact:
        log.warning("llama.cpp step probe: on this model and build neither one-row nor paired steps compute what "
                    "a prefill computes; greedy answers may depend on batching and caching (docs/backends.md)")
    return result
