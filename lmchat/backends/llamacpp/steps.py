"""One scheduler step: decode the next token of every decoding sequence, prefill prompt chunks, sample.

The KV cache has one stream per sequence (``kv_unified`` off): a sequence's
attention reads only its own tokens, so a long idle session does not slow the
others. llama.cpp cuts a batch into micro-batches with an equal number of
tokens per sequence (adjacent sequence ids share one; decoders therefore get
the lowest free ids). A prompt put in the same batch as other sequences' next
tokens would have its first id computed in their micro-batch, and that changes
the logits at the end of the prompt in the last bits (measured: 0.39 on
SmolLM2's logits, enough to flip a greedy near-tie), so a turn's tokens would
depend on what else was running. Decoding tokens and each prompt chunk
therefore go to ``llama_decode`` separately (little is lost: with a stream per
sequence llama.cpp computes a prompt beside decoders in micro-batches of its
own anyway, all but its first id), and a prompt is never split so that its last chunk is one id (the logits of an id
computed alone differ the same way).

One row of a sequence in a micro-batch takes another attention kernel than
two or more (:mod:`.probe`: llamafile's sgemm serves only two rows or more),
whatever the other sequences in the batch hold. Where the start-up probe
finds one row inexact and two exact (``pair_rows``), every sequence gets two
rows per ``llama_decode``: a decoding token goes beside its sequence's
previous id, computed again at its position (:meth:`Steps._again`), and so
does a prompt with a single id left. Then every turn gives exactly the
tokens a prefill of its prompt and of its answer so far gives, alone or
beside others, whatever was cached.

An answer is decoded a token at a time. Where the probe finds the engine's
steps exact (one row exact, or paired rows), a decoded token's keys and
values are a prefill's bit for bit and the answer is reusable as it stands:
nothing more is done. Elsewhere (neither exact: Gemma 3 270M Q4_K_M here,
or ``settle="always"``) a token computed alone gets other keys and values
than a prefill of it (measured: logits up to 0.84 apart), and only what a
prefill computes may be kept for another turn or another prompt. So prefill
capacity the step does not use *settles* an idle sequence: its decoded tail
is prefilled again, which makes the whole sequence exact. The session's
next turn then prefills only its delta, and a stateless client's next
request or a branch may reuse the answer too. Settling costs the prefill
the next turn would otherwise pay, earlier and off its critical path. An idle
engine settles :data:`SETTLE_CHUNK` ids per look at its queue: a request that
arrives meanwhile waits for one chunk, not for a whole answer (all at once, a
300-token answer held the next request 1.9 s on this CPU).
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs

from ...errors import BackendError
from ..base import Chunk
from ._lib import last_error

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_context_p

    from .jobs import Job
    from .kvfiles import DiskEntry
    from .prefix import PrefixIndex
    from .sequences import SequencePool, SessionState
    from .vocab import LlamaVocab

#: ids an idle engine settles between two looks at its queue: small enough that a request arriving meanwhile
#: hardly waits (64 ids prefill in about 0.1-0.3 s on 2 CPU cores), large enough to stay a batched prefill
SETTLE_CHUNK = 64


@attrs.frozen
class StepRules:
    """How :class:`Steps` feeds the context: at most ``n_batch`` ids a ``llama_decode``, ``prefill_chunk`` of a
    prompt while others decode, ``n_ctx_seq`` ids a sequence; the start-up probe's rules (probe.py): two rows per
    sequence (``pair_rows``), decoded ids prefilled again (``settle_decoded``)."""

    n_batch: int
    prefill_chunk: int
    n_ctx_seq: int
    pair_rows: bool
    settle_decoded: bool


class Steps:
    """The :class:`.engine.Engine`'s work on its scheduler thread between two looks at its command queue: it feeds
    the engine's context (``ctx``, through ``batch``) the ids of the sequences ``pool`` holds, indexes what they
    computed in ``index``, and ends a job through ``finish`` and ``fail`` (:class:`.admission.Admission`'s)."""

    def __init__(self, L: ModuleType, ctx: llama_context_p, batch: Any, pool: SequencePool,
                 index: PrefixIndex[SessionState | DiskEntry], vocab: LlamaVocab, rules: StepRules,
                 finish: Callable[[Job, str, str], None], fail: Callable[[Job, BaseException], None]) -> None:
        self._L, self.ctx, self.pool, self.index, self.vocab = L, ctx, pool, index, vocab
        # a llama_batch: llama-cpp-python annotates its fields wrongly (``pos`` as two-dimensional)
        self.batch = batch
        self.rules = rules
        self._finish, self._fail = finish, fail
        self.settled = 0  # decoded ids prefilled again by spare capacity

    def step(self, active: list[Job], waiting: bool) -> None:
        """The next token of every decoding sequence of the ``active`` jobs (one ``llama_decode``), then prefill
        chunks within budget; with no prompt to prefill and none ``waiting``, settle."""
        for job in list(active):
            if job.cancelled.is_set():
                self._finish(job, "cancelled", "")
        # by sequence id: llama.cpp puts adjacent sequences in one micro-batch
        decoding = sorted((j for j in active if j.token is not None), key=lambda j: j.admitted.resident_seq)
        if decoding:
            self._decode(decoding)
        budget = self.rules.prefill_chunk if decoding else self.rules.n_batch
        prompts = [j for j in active if j.fed < len(j.todo)]
        for job in prompts:
            if budget <= 0 or budget < 2 <= len(job.todo) - job.fed:
                break
            budget -= self._prefill(job, budget)
        if not prompts and not waiting:
            self.settle(self.rules.prefill_chunk if decoding else None)

    def _decode(self, jobs: list[Job]) -> None:
        n, rows = 0, []
        for job in jobs:
            state, token = job.admitted, job.token
            assert token is not None, "a decoding job has its next token"
            n = self._put(self._again(n, state), token, len(state.ids), state.resident_seq, True)
            rows.append(n - 1)
        if not self._run(n, jobs):
            return
        for i, job in zip(rows, jobs, strict=True):
            state, token = job.admitted, job.token
            assert token is not None, "a decoding job has its next token"
            if state.decoded_at is None and self.rules.settle_decoded:
                state.decoded_at = len(state.ids)
            state.ids.append(token)
            job.token = None
            self._sample(job, i)

    def _prefill(self, job: Job, budget: int) -> int:
        """Feed the next chunk of ``job``'s prompt, in a ``llama_decode`` of its own; the number of ids fed."""
        state, todo = job.admitted, job.todo
        left = len(todo) - job.fed
        take = min(left, budget)
        if left - take == 1:  # never a lone last id (see the module docstring)
            take = take - 1 if take > 2 else left
        last = take == left
        n = self._again(0, state) if take == 1 else 0
        for i in range(take):
            n = self._put(n, todo[job.fed + i], len(state.ids) + i, state.resident_seq, last and i == take - 1)
        if self._run(n, [job]):
            state.ids.extend(todo[job.fed:job.fed + take])
            job.fed += take
            job.report()
            self.index.put(state)  # what it has computed so far may serve prompts waiting for it
            if last:
                if job.request.params.max_new_tokens <= 0:
                    self._finish(job, "length", "")
                else:
                    self._sample(job, n - 1)
        return take

    def unsettled_states(self) -> list[SessionState]:
        """The idle resident states whose cache holds decoded tokens, or lacks canonical ids a drift rewind
        left to feed (a context shift is the session's own approximation: not settled)."""
        return [s for s in self.pool.owner if s is not None and s.job is None and s.shifted_at is None
                and (s.decoded_at is not None and len(s.ids) >= 2 or len(s.unfed) >= 2)]

    def unsettled(self) -> SessionState | None:
        """The one to settle first: the one used last."""
        return max(self.unsettled_states(), key=lambda s: s.tick, default=None)

    def settle(self, limit: int | None) -> None:
        """Prefill again one chunk of the decoded tail of :meth:`unsettled` and of the ids it lacks but the one
        sampled last: at most :data:`SETTLE_CHUNK` ids a call, two or more, in a ``llama_decode`` of its own (see
        the module docstring), so a turn that arrives meanwhile waits for one chunk, never for a whole answer.
        ``limit``: the prefill the step has left (None: an idle engine); an answer with more left to settle
        waits for an idle engine rather than stall the decoders."""
        state = self.unsettled()
        if state is None:
            return
        ids = state.ids + state.unfed[:-1]
        start = min(len(state.ids) if state.decoded_at is None else state.decoded_at, len(ids) - 2)
        left = len(ids) - start
        if limit is not None and left > limit:
            return
        take = min(left, self.rules.prefill_chunk, SETTLE_CHUNK)
        if left - take == 1:  # never leave one id to be computed alone
            take = left if take == 2 else take - 1
        end = start + take
        # llama.cpp takes a sequence's positions only in order: the decoded ids after the chunk leave the cache
        # too and wait, as ids the session holds but the cache does not (unfed), for the next chunks
        if not self._L.llama_memory_seq_rm(self.pool.mem, state.seq, start, -1):
            self.pool.clear(state)  # a memory that cannot cut a sequence (recurrent models): nothing to keep
            return
        del state.ids[start:]  # the sequence holds exactly its ids at every step (a failed batch clears it)
        n = 0
        for pos in range(start, end):
            n = self._put(n, ids[pos], pos, state.resident_seq, False)
        if not self._run(n, []):
            self.pool.clear(state)  # what the failed batch wrote is unknown
            return
        self.settled += take
        state.ids, state.unfed = ids[:end], ids[end:] + state.unfed[-1:]
        state.decoded_at = None
        self.index.put(state)  # the ids it was indexed under are unchanged: it only gains blocks

    def rewind(self, state: SessionState | None, start: int, count: int, canonical: list[int]) -> None:
        """The session's last answer met retokenization drift: from ``start`` its ``count`` ids (fed and
        unfed) are not the canonical encoding of its text, ``canonical``, which the session holds instead
        (docs/tokens.md). Swap them now, so the canonical ids get settled while the engine is idle and every
        later prompt (the session's, a stateless client's resending the history, a branch's, a resumed
        conversation's) finds them; the session's next turn then discards that range for nothing.
        ``state``: the session's (None: the engine holds none)."""
        if state is None or state.seq is None or state.busy or state.shifted_at is not None \
                or len(state.ids) + len(state.unfed) != start + count or start <= 0:
            return  # not what the session says the engine holds: its next turn's discard does it
        if start > len(state.ids) and not self._feed(state, start):  # settling had taken the answer back to feed
            return
        if start < len(state.ids) and not self._L.llama_memory_seq_rm(self.pool.mem, state.seq, start, -1):
            return
        state.forget_tail(start)
        state.unfed = list(canonical)
        state.rewound = (start, count)
        self.index.put(state)

    def _feed(self, state: SessionState, upto: int) -> bool:
        """Prefill ``state``'s unfed ids up to position ``upto`` now (a drift rewind that lands while settling
        has moved the answer's ids out of the cache: those before the drift are the canonical ones, and the
        rewind keeps them). False if a batch failed (the state is then cleared)."""
        while len(state.ids) < upto:
            take = min(upto - len(state.ids), self.rules.n_batch)
            at = len(state.ids)
            n = self._again(0, state) if take == 1 else 0
            for i in range(take):
                n = self._put(n, state.unfed[i], at + i, state.resident_seq, False)
            if not self._run(n, []):
                self.pool.clear(state)
                return False
            state.ids, state.unfed = state.ids + state.unfed[:take], state.unfed[take:]
        return True

    def _again(self, n: int, state: SessionState) -> int:
        """Where one-row steps are not exact (:mod:`.probe`): put ``state``'s last id again, at its position, before
        the one row the step would give the sequence, so that the sequence has two rows in the micro-batch and its
        attention takes the prefill's kernel (the id's cell is cut first: a position is held once). The id's keys
        and values are then recomputed as a two-row prefill computes them."""
        if not self.rules.pair_rows or not state.ids:
            return n
        at = len(state.ids) - 1
        if not self._L.llama_memory_seq_rm(self.pool.mem, state.seq, at, -1):
            return n  # a memory that cannot cut (recurrent models) has no attention to pair
        return self._put(n, state.ids[at], at, state.resident_seq, False)

    def _run(self, n: int, jobs: list[Job]) -> bool:
        self.batch.n_tokens = n
        rc = self._L.llama_decode(self.ctx, self.batch)
        if rc == 0:
            return True
        for job in jobs:  # what the failed batch wrote is unknown: those sequences start over next turn
            self.pool.clear(job.admitted)
            self._fail(job, BackendError(f"llama_decode failed ({rc}): "
                                         f"{last_error() or 'see the lmchat.llamacpp log'}"))
        return False

    def _put(self, n: int, token: int, pos: int, seq: int, logits: bool) -> int:
        b = self.batch
        b.token[n] = token
        b.pos[n] = pos
        b.seq_id[n][0] = seq
        b.logits[n] = logits
        return n + 1

    def _sample(self, job: Job, index: int) -> None:
        sampler, matcher = job.sampler, job.matcher
        assert sampler is not None and matcher is not None, "set by Engine._start"
        token = sampler.sample(self.ctx, index)
        job.generated += 1
        result = matcher.feed_ids([token], self.vocab.decode)
        if result.stopped:
            job.token = token  # the end marker (or the token holding a stop string): never fed
            self._finish(job, "stop", result.text)
            return
        new = matcher.kept_ids[job.kept:]
        if result.text or new:
            job.kept += len(new)
            job.out.put(Chunk(text=result.text, token_ids=tuple(new)))
        job.token = token
        if job.generated >= job.request.params.max_new_tokens or len(job.admitted.ids) >= self.rules.n_ctx_seq:
            self._finish(job, "length", "")

