"""Many sessions over one backend and one store, for servers: see ``docs/manager.md``.

:class:`SessionManager` runs turns (each a :class:`TurnRequest`) end to end (delta, generation, commit,
compare-and-set save), one at a time per session, within capacity limits (:class:`ManagerLimits`),
from threads or asyncio; :class:`TurnResult` is a collected turn;
:class:`OneOff` a session for one turn that the store never sees.
"""
from ..turns.result import TurnResult
from .core import ManagerLimits, SessionManager
from .oneoff import OneOff
from .request import ANY_KIND, TurnRequest
from .turn_calls import TurnStream

__all__ = ["ANY_KIND", "ManagerLimits", "OneOff", "SessionManager", "TurnRequest", "TurnResult", "TurnStream"]
