"""Many sessions over one backend and one store, for servers: see ``docs/manager.md``.

:class:`SessionManager` runs turns end to end (delta, generation, commit,
compare-and-set save), one at a time per session, within capacity limits,
from threads or asyncio; :class:`TurnResult` is a collected turn.
"""
from .core import SessionManager
from ..turns.turn import TurnResult

__all__ = ["SessionManager", "TurnResult"]
