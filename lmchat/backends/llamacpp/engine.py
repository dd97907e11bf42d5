"""The scheduler: one thread owns the llama context and serves every session's turns together.

``submit(request)`` (any thread) queues a :class:`Job` and returns it; the
caller reads :class:`Chunk` s from ``job.out``. The scheduler thread loops:

1. take new jobs, drops and the close request off its command queue;
2. give waiting jobs a sequence (the session's own if it is resident, a free
   one, or one freed by evicting an idle state to the host cache: orphans
   first, then the least recently used session), restore saved states, and
   plan each turn's prefill from the delta (:func:`.planning.plan_turn`);
   a sequence that would prefill more than it holds starts instead from the
   longest exact prefix of its prompt held anywhere (:meth:`.reuse.PrefixReuse.reuse`);
3. one ``llama_decode`` of the next token of every decoding sequence; then
   chunks of the prompts being prefilled, each in a ``llama_decode`` of its
   own, within a per-step budget (``prefill_chunk`` ids while others decode,
   so a long prompt does not stall them; a whole batch when nobody decodes);
   sample each sequence whose logits came out;
4. with prefill capacity left and no prompt waiting, *settle* the idle
   sequence used last: prefill its decoded answer again, so that its whole
   cache is what a prefill computes (reusable by its next turn and by any
   other prompt). An engine with nothing else to do keeps settling until no
   sequence needs it, then waits for commands.

The engine holds four parts, each with its own state and a reference to what
it needs: :class:`.admission.Admission` (the jobs, from waiting for a sequence
to their last chunk), :class:`.steps.Steps` (the per-step work, and why prompts
and decoding tokens go to separate ``llama_decode`` calls), :class:`.reuse.PrefixReuse`
(the prefix cache: orphans, reuse, spilling, publishing) and
:class:`.inspection.Inspection` (read-only views). The engine itself is the
command loop: other threads reach the scheduler through typed commands
(:mod:`.commands`) on one queue.

The KV tiers (resident sequences, host memory, disk files, indexed by their
token ids; a dropped session's state kept as an *orphan* prefix) are
described in docs/backends.md, "Where a session's KV lives".
"""
from __future__ import annotations

import atexit
import ctypes
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import BackendError
from ..base import GenerationRequest
from ._lib import lib
from .admission import Admission
from .commands import Call, Close, Command, Drop, Expect, Rewind
from .grammars import Grammars
from .hostcache import HostCache
from .inspection import Inspection
from .jobs import Job
from .kvfiles import DiskEntry, DiskTier
from .prefix import PrefixIndex
from .probe import LONG_PREFIX, LONG_STEPPED, Settle, StepProbe, probe_steps
from .reuse import PrefixReuse
from .sequences import SequencePool, SessionState
from .shape import ContextShape
from .steps import StepRules, Steps
from .vocab import LlamaVocab

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_model_p

T = TypeVar("T")

_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
#: seconds after a turn ends before an idle engine settles: a request that comes at once (a stateless client's
#: next one, a branch, a retry) starts at once rather than wait for a settling chunk it may not need (bench
#: kv_cache's branch waited 146 ms of its 300 ms for the drift rewind of an answer it does not hold); a client
#: that reads the answer first still finds it settled
SETTLE_AFTER = 0.1


@atexit.register
def _close_all() -> None:
    """Stop every scheduler before the interpreter goes: a thread killed inside llama_decode can crash the exit."""
    for engine in list(_ENGINES):
        engine.close()


class Engine:
    """A llama context with ``n_seq`` resident sequences of ``n_ctx // n_seq`` tokens each, and its scheduler."""

    def __init__(self, model: llama_model_p, vocab: LlamaVocab, shape: ContextShape, *, host_bytes: int,
                 disk: DiskTier | None = None, settle: Settle = "auto") -> None:
        L = self._L = lib()
        self.ctx = L.llama_init_from_model(model, shape.params(L))
        if not self.ctx:
            raise BackendError(f"llama.cpp could not create a context of {shape.n_ctx} tokens for {shape.n_seq} "
                               f"sequences (out of memory? see the lmchat.llamacpp log)")
        self.vocab = vocab
        self.n_vocab = vocab.n_tokens
        self.grammars = Grammars(L.llama_model_get_vocab(model), vocab.eog_ids)
        self.n_ctx_seq = int(L.llama_n_ctx_seq(self.ctx))  # what one sequence can hold
        self.batch = L.llama_batch_init(shape.n_batch, 0, 1)
        for i in range(shape.n_batch):
            self.batch.n_seq_id[i] = 1
        self.host = HostCache(host_bytes)
        self.pool = SequencePool(self.ctx, shape.n_seq, self.host)
        desc = ctypes.create_string_buffer(128)
        L.llama_model_desc(model, desc, len(desc))  # "llama 135M Q4_1": architecture, size, weight type
        kernels = (desc.value, int(L.llama_model_size(model)), int(L.llama_model_n_params(model)), self.n_vocab,
                   *shape.kernels)
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._built = threading.Event()  # set once the parts below exist (or failed to: _closed is then set)
        probed: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        # flash attention splits a long context over the threads for one row (probe.py): checked where it runs
        long_context = (shape.flash_attn and self.n_ctx_seq >= LONG_PREFIX + LONG_STEPPED
                        and shape.n_batch >= LONG_PREFIX)
        self._thread = threading.Thread(target=self._run, args=(kernels, long_context, probed), name="lmchat-llamacpp",
                                        daemon=True)
        self._thread.start()
        ok, step_probe = probed.get()
        if not ok:
            self._thread.join()
            raise step_probe
        try:
            self._build(shape, disk, settle, step_probe)
        except BaseException:
            self._closed = True
            self._built.set()
            self._thread.join()
            raise
        self._built.set()
        _ENGINES.add(self)

    def _build(self, shape: ContextShape, disk: DiskTier | None, settle: Settle, step_probe: StepProbe) -> None:
        """The engine's parts, once the probe has said how its steps compute."""
        self.sessions: dict[str, SessionState] = {}
        self.index: PrefixIndex[SessionState | DiskEntry] = PrefixIndex()
        self.disk = disk
        if disk is not None:
            for entry in disk.start(self.n_ctx_seq):
                self.index.put(entry)
        rules = StepRules(n_batch=shape.n_batch, prefill_chunk=max(2, min(shape.prefill_chunk, shape.n_batch)),
                          n_ctx_seq=self.n_ctx_seq, pair_rows=step_probe.pair_rows,
                          settle_decoded=settle == "always" or not step_probe.exact_steps)
        self.prefix = PrefixReuse(self.pool, self.index, self.vocab, self.sessions, disk, self.n_ctx_seq)
        self.jobs = Admission(self.pool, self.index, self.prefix, self.sessions, self.vocab, self.grammars,
                              self.n_ctx_seq, disk)
        self.steps = Steps(self._L, self.ctx, self.batch, self.pool, self.index, self.vocab, rules, self.jobs.finish,
                           self.jobs.fail)
        self.inspection = Inspection(self._L, self.pool, self.host, self.sessions, self.jobs.served, self.steps,
                                     self.prefix, step_probe, shape.flash_attn)

    # ------------------------------------------------------------------ any thread
    def submit(self, request: GenerationRequest) -> Job:
        job = Job(request)
        with self._lock:
            if self._closed:
                raise BackendError("the llamacpp backend is closed")
            self.jobs.register(job)
        self._commands.put(job)
        return job

    def cancel(self, session_id: str) -> None:
        self.jobs.cancel(session_id)

    def drop(self, session_id: str) -> None:
        self._commands.put(Drop(session_id))

    def expect(self, session_id: str, seconds: float) -> None:
        """The session's client is expected back within ``seconds`` (it runs the tools the answer called):
        its KV is evicted after every other idle state's until then, or until its next turn starts."""
        self._commands.put(Expect(session_id, seconds))

    def rewind(self, session_id: str, start: int, count: int, canonical: list[int]) -> None:
        """The session's last answer met retokenization drift: see :meth:`.steps.Steps.rewind`."""
        self._commands.put(Rewind(session_id, start, count, canonical))

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the scheduler thread (which owns the context) and return its result."""
        command = Call(fn)
        self._commands.put(command)
        result = command.box.get()
        if not result[0]:
            raise result[1]
        return result[1]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._commands.put(Close())
        self._thread.join()

    # ------------------------------------------------------------------ views (scheduler thread: through call)
    def where(self, session_id: str) -> str | None:
        return self.inspection.where(session_id)

    def held_ids(self, session_id: str) -> list[int] | None:
        return self.inspection.held_ids(session_id)

    def pos_max(self, session_id: str) -> int | None:
        return self.inspection.pos_max(session_id)

    def problems(self) -> list[str]:
        return self.inspection.problems()

    def stats(self) -> dict[str, Any]:
        return self.inspection.stats()

    def cached(self, session_id: str, ids: list[int]) -> tuple[int, str | None]:
        return self.prefix.cached(session_id, ids)

    def reset_prefix_cache(self, disk: bool = False) -> int:
        return self.prefix.reset_prefix_cache(disk)

    @property
    def pair_rows(self) -> bool:
        return self.steps.rules.pair_rows

    def _settle(self, limit: int | None) -> None:
        """One settling chunk now (tests/test_settling.py drives settling by hand through it)."""
        self.steps.settle(limit)

    # ------------------------------------------------------------------ the scheduler thread
    def _run(self, kernels: tuple[Any, ...], long_context: bool, probed: queue.SimpleQueue[tuple[bool, Any]]) -> None:
        """The scheduler thread, which makes every ``llama_decode`` of the context, the start-up probe's first.

        One thread, because llama.cpp's CPU threads are OpenMP's and libgomp keeps a team of worker threads for
        each thread that starts a parallel region: a probe run on the constructing thread left a second team
        beside the scheduler's, more OpenMP threads than CPUs, and libgomp then cuts every wait's spin short
        (its throttled spin count), so each of the scheduler's waits slept: one-row steps took 18.6-20.5 ms
        instead of 9.6 on 2 cores, for the engine's whole life, whenever the probe was measured rather than
        read from the cache (docs/backends.md, threads)."""
        try:
            step_probe = probe_steps(self._L, self.ctx, self.batch, self.pool.mem, self.n_vocab, 0, kernels,
                                     long_context=long_context)
        except BaseException as exc:
            probed.put((False, exc))
            return
        probed.put((True, step_probe))
        self._built.wait()
        if not self._closed:
            self._loop()

    def _loop(self) -> None:
        try:
            while self._take_commands(self._wait()):
                jobs = self.jobs
                try:
                    jobs.admit()
                    held = bool(jobs.waiting) or not jobs.active and self._settle_in() > 0
                    self.steps.step(jobs.active, waiting=held)
                except Exception as exc:  # a bug or a library failure: end every stream with it, keep serving
                    jobs.fail_all(exc if isinstance(exc, BackendError) else BackendError(f"llamacpp: {exc!r}"),
                                  clear=True)  # their caches may be half-written
        finally:
            self.jobs.fail_all(BackendError("the llamacpp backend was closed"))
            self._drain_closed()
            self.prefix.persist(self.steps)
            self._free()

    def _wait(self) -> float | None:
        """How long the loop waits for a command: not at all with a turn to serve, until one comes with nothing to
        do, else until an idle engine may settle."""
        if self.jobs.active or self.jobs.waiting:
            return 0.0
        return None if self.steps.unsettled() is None else self._settle_in()

    def _settle_in(self) -> float:
        """Seconds before an idle engine may settle: :data:`SETTLE_AFTER` after the last turn ended."""
        return max(0.0, self.jobs.ended + SETTLE_AFTER - time.monotonic())

    def _take_commands(self, wait: float | None) -> bool:
        """Apply queued commands, waiting ``wait`` seconds for the first (None: until one comes); False once
        close() was asked for."""
        while True:
            try:
                command = self._commands.get_nowait() if wait == 0 else self._commands.get(timeout=wait)
            except queue.Empty:
                return True
            wait = 0.0
            if isinstance(command, Close):
                return False
            if isinstance(command, Job):
                self.jobs.waiting.append(command)
            elif isinstance(command, Drop):
                self.jobs.drop(command.session_id)
            elif isinstance(command, Expect):
                state = self.sessions.get(command.session_id)
                if state is not None:
                    state.expected_until = time.monotonic() + command.seconds
            elif isinstance(command, Rewind):
                self.steps.rewind(self.sessions.get(command.session_id), command.start, command.count,
                                  command.canonical)
            else:
                try:
                    command.box.put((True, command.fn()))
                except Exception as exc:
                    command.box.put((False, exc))

    def _drain_closed(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, Job):
                self.jobs.fail(command, BackendError("the llamacpp backend was closed"))
            elif isinstance(command, Call):
                command.box.put((False, BackendError("the llamacpp backend was closed")))

    def _free(self) -> None:
        L = self._L
        self.grammars.close()
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        self.ctx = None
