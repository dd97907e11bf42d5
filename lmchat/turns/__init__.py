"""The turn protocol the REPL and the session manager share (:mod:`.turn`), and the bridge that runs
a turn in a worker thread for a consumer in another (:mod:`.bridge`)."""
from .bridge import Done, Pump
from .result import TurnResult
from .turn import AsyncOwner, AsyncTurn, Owner, Turn

__all__ = ["AsyncOwner", "AsyncTurn", "Done", "Owner", "Pump", "Turn", "TurnResult"]
