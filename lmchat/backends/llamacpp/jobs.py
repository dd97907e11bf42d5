"""A turn as the llama.cpp scheduler (:mod:`.engine`) holds it: its request, the queue its chunks go to, and where
its prompt and answer stand."""
from __future__ import annotations

import queue
import threading

import attrs

from ...stops import StopMatcher
from ..base import Chunk, GenerationRequest
from .sampler import Sampler
from .sequences import SessionState


@attrs.define(eq=False)
class Job:
    request: GenerationRequest
    out: queue.SimpleQueue[Chunk | BaseException] = attrs.field(factory=queue.SimpleQueue)
    cancelled: threading.Event = attrs.field(factory=threading.Event)
    state: SessionState | None = None
    todo: list[int] = attrs.field(factory=list)  # prompt ids to prefill
    fed: int = 0  # how many of them are in the cache
    reused: int = 0
    target: list[int] | None = None  # a new sequence's whole prompt, once worked out
    adopted: bool = False  # its sequence was an orphan's: plan from the prompt's ids, not from counts
    cached_from: str | None = None  # where the reused ids came from: session, resident, host, disk
    miss: str | None = None  # why a held prefix could not be used
    sampler: Sampler | None = None
    matcher: StopMatcher | None = None
    kept: int = 0  # ids of matcher.kept_ids already sent
    generated: int = 0
    token: int | None = None  # sampled and sent, fed at the next decode step
    finished: bool = False

    @property
    def session_id(self) -> str:
        return self.request.session_id

    def report(self) -> None:
        """Tell the caller how far the prompt's prefill is (:attr:`GenerationRequest.progress`)."""
        progress = self.request.progress
        if progress is not None:
            progress(self.fed, len(self.todo))

    @property
    def admitted(self) -> SessionState:
        """Its state, which :meth:`.admission.Admission.admit` sets before anything else reads it."""
        assert self.state is not None, "the job is not admitted yet"
        return self.state
