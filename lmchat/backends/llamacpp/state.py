"""What the parts of :class:`.engine.Engine` share: the attributes its ``__init__`` sets and the methods one
part calls on another (:class:`.steps.Steps`, :class:`.reuse.PrefixReuse` and :class:`.inspection.Inspection`
are mixins of the one engine, each in a module of its own). Annotations only: nothing here exists at run time
but the class."""
from __future__ import annotations

from collections import Counter, deque
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_context_p

    from .jobs import Job
    from .grammars import Grammars
    from .kvfiles import DiskEntry, DiskTier
    from .prefix import PrefixIndex
    from .probe import StepProbe
    from .sequences import HostCache, SequencePool, SessionState
    from .vocab import LlamaVocab


class EngineState:
    """The scheduler's state, set by :meth:`.engine.Engine.__init__` (see there)."""

    _L: ModuleType
    ctx: llama_context_p | None  # None once freed
    vocab: LlamaVocab
    n_vocab: int
    grammars: Grammars
    n_seq: int
    n_ctx_seq: int
    n_batch: int
    prefill_chunk: int
    # a llama_batch: llama-cpp-python annotates its fields wrongly (``pos`` as two-dimensional)
    batch: Any
    host: HostCache
    pool: SequencePool
    sessions: dict[str, SessionState]
    orphans: set[SessionState]
    index: PrefixIndex[SessionState | DiskEntry]
    disk: DiskTier | None
    published: dict[str, DiskEntry]
    served: Counter[str]
    misses: Counter[str]
    settled: int
    step_probe: StepProbe
    pair_rows: bool  # give every sequence two rows per llama_decode (steps.py, probe.py)
    settle_decoded: bool  # decoded ids hold other keys and values than a prefill's: prefill them again (steps.py)
    _waiting: deque[Job]
    _active: list[Job]

    if TYPE_CHECKING:  # defined by one part, called by another
        def _finish(self, job: Job, reason: str, text: str = "") -> None: ...  # engine.py

        def _fail(self, job: Job, exc: BaseException) -> None: ...  # engine.py

        def _settle(self, limit: int | None) -> None: ...  # steps.py

        def unsettled(self) -> SessionState | None: ...  # steps.py

        def unsettled_states(self) -> list[SessionState]: ...  # steps.py
