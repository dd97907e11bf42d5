"""Sessions: one conversation kept in step with what the engine holds (see :mod:`.core`).

:mod:`.state` (the delta, the held state), :mod:`.planning` (the next delta in
O(turn)), :mod:`.overflow` (``session_len`` policies), :mod:`.reopening`
(continuing the last answer), :mod:`.policy` (its limits and policies), :mod:`.tokens` and :mod:`.vocab` (token ids,
content never parsed as markers), :mod:`.edits` (resume, fork, system,
template, the commit of a generation).
"""
from .core import OVERFLOW_POLICIES, Session
from .policy import DRIFT_POLICIES, SessionPolicy
from .snapshot import FORMAT_VERSION
from .state import Delta

__all__ = ["DRIFT_POLICIES", "FORMAT_VERSION", "OVERFLOW_POLICIES", "Delta", "Session", "SessionPolicy"]
