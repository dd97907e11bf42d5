"""The ids of a session's items along its ancestry: a branch's first items keep the ids they had in the chain
or conversation it was forked from (:class:`Names`), which is how a response's input items read the same on
every branch (GET /v1/responses/ID/input_items)."""
from __future__ import annotations

import bisect
from collections.abc import Sequence

import attrs

from .chain_state import Run, SessionState
from .items import Serials


def count_below(removed: Sequence[int], serial: int) -> int:
    """How many items there are now before ``serial`` (``removed``: the deleted serials, sorted)."""
    return serial - bisect.bisect_left(removed, serial)


class Names:
    """The ids of a session's items: item ``i`` is named ``(sid, serial)``, as :mod:`.items` spells it.

    A branch's first items are copies of its ancestry's, and keep the ids they were returned with: ``origin``
    lists them as :class:`~.chain_state.Run` s (a conversation's deleted items split its runs). The session's
    own items follow, numbered by :class:`~.items.Serials`. Stored with the branch, so that its names do not
    depend on its ancestors still being there, or unchanged.
    """

    def __init__(self, sid: str, state: SessionState) -> None:
        self.sid, self.origin, self.serials = sid, state.origin, Serials(state.deleted_items)
        self.removed = self.serials.removed
        self.starts: list[int] = []
        self.inherited = 0  # where each run starts; how many items the origin names
        for run in self.origin:
            self.starts.append(self.inherited)
            self.inherited += run.count

    def of(self, i: int) -> tuple[str, int]:
        """(session id, serial) of item ``i``."""
        if i < self.inherited:
            j = bisect.bisect_right(self.starts, i) - 1
            run = self.origin[j]
            return run.session, run.first_serial + i - self.starts[j]
        return self.sid, self.serials.serial(i)

    def index(self, sid: str, serial: int) -> int | None:
        """Where the item ``(sid, serial)`` is (a deleted own item: where the next one is), None: not here."""
        for start, run in zip(self.starts, self.origin, strict=True):
            if run.session == sid and run.first_serial <= serial < run.first_serial + run.count:
                return start + serial - run.first_serial
        if sid != self.sid:
            return None
        at = count_below(self.removed, serial)
        return at if at >= self.inherited else None

    def runs(self, n: int) -> tuple[Run, ...]:
        """The origin of a branch holding the first ``n`` items: runs naming them as they are named here."""
        runs, i = [], 0
        for run in self.origin:
            if i == n:
                break
            runs.append(attrs.evolve(run, count=min(run.count, n - i)))
            i += runs[-1].count
        while i < n:
            serial = self.serials.serial(i)
            later = bisect.bisect_right(self.removed, serial)
            gap = self.removed[later] - serial if later < len(self.removed) else n - i
            runs.append(Run(self.sid, serial, min(gap, n - i)))
            i += runs[-1].count
        return tuple(runs)
