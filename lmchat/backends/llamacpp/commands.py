"""What other threads ask of the :class:`.engine.Engine`'s scheduler thread, one frozen record per command.

They go through one queue, so they are applied in the order they were asked (a drop after the turn it follows, a
rewind after the turn it corrects); the scheduler dispatches on the type.
"""
from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

import attrs

from .jobs import Job

T = TypeVar("T")
#: a call's result or its exception
Outcome = tuple[Literal[True], T] | tuple[Literal[False], BaseException]


@attrs.frozen
class Drop:
    """The session is gone: its state becomes an orphan (after its running turn, if any)."""

    session_id: str


@attrs.frozen
class Expect:
    """The session's client is expected back within ``seconds``: evict its KV last until then."""

    session_id: str
    seconds: float


@attrs.frozen
class Rewind:
    """The session's last answer met retokenization drift (:meth:`.steps.Steps.rewind`)."""

    session_id: str
    start: int
    count: int
    canonical: list[int]


@attrs.frozen(eq=False)
class Call(Generic[T]):
    """Run ``fn`` on the scheduler thread, its outcome put in ``box``."""

    fn: Callable[[], T]
    box: queue.SimpleQueue[Outcome[T]] = attrs.field(factory=queue.SimpleQueue)


@attrs.frozen
class Close:
    """Stop the scheduler: fail what is queued, write the states to disk, free the context."""


#: a new turn or one of the commands above (a call's result type is its caller's: Engine.call is typed, the queue
#: holds calls of any)
Command = Job | Drop | Expect | Rewind | Call[Any] | Close
