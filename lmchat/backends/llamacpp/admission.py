"""A turn's way through the :class:`.engine.Engine`, from the queue it waits in to its last chunk.

:class:`Admission` holds the jobs: those that wait for a sequence (``waiting``), those the scheduler steps
(``active``) and, for other threads, which session runs which job (``register``, ``cancel``). On the scheduler
thread it admits a waiting job (the session's state, a sequence: its own, an orphan's, a free one or an evicted
idle one's), plans its prefill and reuse, and ends it (``finish``, ``fail``), which frees what the job held and
keeps the session's state where the next turn finds it.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, deque

from ...errors import BackendError, ConstraintUnsupported
from ..base import Chunk
from .grammars import Grammars
from .jobs import Job
from .kvfiles import DiskEntry, DiskTier
from .planning import plan_turn
from .prefix import PrefixIndex
from .reuse import PrefixReuse
from .sampler import answer_sampling
from .sequences import SequencePool, SessionState
from .vocab import LlamaVocab


class Admission:
    """The engine's jobs: ``sessions`` (its states by session id), ``pool``, ``index`` and ``prefix`` are the
    engine's, shared; ``served`` counts prompt tokens by where they came from; ``ended`` is when the last job
    ended (monotonic)."""

    def __init__(self, pool: SequencePool, index: PrefixIndex[SessionState | DiskEntry], prefix: PrefixReuse,
                 sessions: dict[str, SessionState], vocab: LlamaVocab, grammars: Grammars, n_ctx_seq: int,
                 disk: DiskTier | None) -> None:
        self.pool, self.index, self.prefix, self.sessions = pool, index, prefix, sessions
        self.vocab, self.grammars, self.n_ctx_seq, self.disk = vocab, grammars, n_ctx_seq, disk
        self.served: Counter[str] = Counter()  # prompt tokens by where they came from (prefilled included)
        self.waiting: deque[Job] = deque()
        self.active: list[Job] = []
        self.ended = 0.0
        self._ticks = itertools.count(1)
        self._running: dict[str, Job] = {}  # session id -> job, read by cancel() from any thread
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ any thread
    def register(self, job: Job) -> None:
        """The job runs for its session from now until it ends; a session runs one job at a time."""
        with self._lock:
            if job.session_id in self._running:
                raise BackendError(f"a generation is already running for session {job.session_id!r}")
            self._running[job.session_id] = job

    def cancel(self, session_id: str) -> None:
        with self._lock:
            job = self._running.get(session_id)
        if job is not None:
            job.cancelled.set()

    # ------------------------------------------------------------------ the scheduler thread
    def admit(self) -> None:
        """Start the waiting jobs that can have a sequence (in arrival order)."""
        waiting, self.waiting = self.waiting, deque()
        for job in waiting:
            if job.finished:
                continue
            if job.cancelled.is_set():
                self.finish(job, "cancelled", "")
                continue
            state = job.state or self.sessions.get(job.session_id)
            if state is None:
                state = self.sessions[job.session_id] = SessionState(job.session_id)
            if state.job is not None and state.job is not job:
                self.fail(job, BackendError(f"a generation is already running for session {job.session_id!r}"))
                continue
            job.state, state.job, state.expected_until = state, job, 0.0
            if self.prefix.behind_prefill(job, self.active):
                self.waiting.append(job)
                continue
            if state.seq is None and not self.prefix.take_orphan(job) and not self._place(state):
                self.waiting.append(job)  # every sequence is busy: wait for one
                continue
            self._start(job)

    def drop(self, session_id: str) -> None:
        """The session is gone: its state becomes an orphan, after its running job if it has one."""
        self.prefix.unpublish(session_id)
        state = self.sessions.get(session_id)
        if state is None:
            return
        if state.busy:
            state.drop_after = True
            return
        del self.sessions[session_id]
        self.prefix.orphan(state)

    def _place(self, state: SessionState) -> bool:
        seq = self.pool.free_seq()
        if seq is None:
            victim = self.pool.victim()
            if victim is None:
                return False
            seq = victim.resident_seq
            self.prefix.spill(self.pool.evict(victim))
        self.pool.attach(state, seq)
        return True

    def _start(self, job: Job) -> None:
        request, state = job.request, job.admitted
        params = request.params
        try:
            job.todo = plan_turn(self.pool, state, request, self.vocab, job.target if job.adopted else None)
        except Exception as exc:
            self.pool.clear(state)
            self.fail(job, exc if isinstance(exc, BackendError) else BackendError(f"bad request: {exc}"))
            return
        need = len(state.ids) + len(job.todo)
        if need > self.n_ctx_seq:
            self.fail(job, BackendError(
                f"session {job.session_id!r} needs {need} tokens of context, more than the {self.n_ctx_seq} "
                f"a sequence holds (ctx / sessions); give the session a smaller session_len "
                "or the backend a larger ctx"))
            return
        if job.cached_from is None and state.ids:
            job.cached_from = "session"
        self.prefix.reuse(job)
        job.reused = len(state.ids)
        self.index.put(state)
        if job.reused:
            assert job.cached_from is not None, "ids held before the delta came from somewhere (above, or reuse)"
            self.served[job.cached_from] += job.reused
        self.served["prefilled"] += len(job.todo)
        job.report()  # before the first batch: a long prompt shows its size at once
        try:  # checked on the caller's thread already: only a grammar that failed to parse again gets here
            job.matcher, job.sampler = answer_sampling(params, self.vocab, self.grammars, state.ids + job.todo)
        except ConstraintUnsupported as exc:
            self.fail(job, exc)
            return
        self.active.append(job)

    # ------------------------------------------------------------------ ending a job
    def finish(self, job: Job, reason: str, text: str) -> None:
        matcher = job.matcher
        if matcher is not None:
            text += matcher.finish()
        kept = matcher.kept_ids[job.kept:] if matcher is not None else []
        last = Chunk(text=text, token_ids=tuple(kept), finish_reason=reason,
                     stop=matcher.stop if reason == "stop" and matcher is not None else None,
                     prefilled=job.fed, reused=job.reused, cached_from=job.cached_from if job.reused else None,
                     cache_miss_reason=job.miss)
        state = job.state
        if job.token is not None and state is not None and state.job is job and state.ids:
            state.unfed = [job.token]  # sampled last, never fed: the next turn feeds it before its delta
        self._release(job)
        job.out.put(last)
        if state is not None and self.disk is not None and self.disk.shared:
            self.prefix.publish(state)  # after the answer went out: the copy costs the next turn, not this one

    def fail(self, job: Job, exc: BaseException) -> None:
        self._release(job)
        job.out.put(exc)

    def fail_all(self, exc: BaseException, clear: bool = False) -> None:
        """End every active and waiting job with ``exc``; ``clear``: empty their sequences first (a failed step
        may have half-written them)."""
        jobs, self.waiting = [*self.active, *self.waiting], deque()
        for job in jobs:
            if clear and job.state is not None and job.state.seq is not None:
                self.pool.clear(job.state)
            self.fail(job, exc)

    def _release(self, job: Job) -> None:
        if job.finished:
            return
        job.finished = True
        self.ended = time.monotonic()
        if job.sampler is not None:
            job.sampler.free()
        if job in self.active:
            self.active.remove(job)
        state = job.state
        if state is not None and state.job is job:
            state.job = None
            state.tick = next(self._ticks)
            if state.drop_after:
                state.drop_after = False
                if self.sessions.get(state.session_id) is state:
                    del self.sessions[state.session_id]
                self.prefix.orphan(state)
            elif state.tier is not None:
                self.index.put(state)
        with self._lock:  # before the last chunk goes out: the caller may start the next turn at once
            if self._running.get(job.session_id) is job:
                del self._running[job.session_id]
