"""An exact index of token-id prefixes: which held KV state shares the longest prefix with a prompt.

Every entry the engine can start a sequence from -- a resident sequence, a
state saved in host memory, a KV file on disk -- is indexed by the chained
hashes of its block-aligned prefixes (``BLOCK`` ids each), the scheme of
vLLM's and SGLang's prefix caches. A lookup walks the prompt's blocks down
the chain and takes the deepest block some entry holds; the hash only points
the way: the entry's ids are then compared with the prompt id by id, and the
common prefix is extended past the last whole block, so a match is exact by
construction and a stale or colliding entry is simply not used.

Entries are any objects with (:class:`Indexed`) ``ids`` (the ids whose keys and values they
hold, position by position), ``exact`` (how many leading ids hold what a
fresh prefill computes: a context shift rotates the keys after the ids it
removed, and those may serve their own session but nobody else) and
``version`` (changed whenever ids are cut or replaced). An entry's ids may
grow after it is indexed (a running turn appends to its sequence): its
indexed prefixes stay true, and :meth:`PrefixIndex.put` then only hashes the
new blocks. Ids changed behind the index's back are caught by the id check
at lookup, and the entry is forgotten then.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

#: ids per indexed block: a smaller block finds longer prefixes, a larger one costs fewer hashes
BLOCK = 32


class Indexed(Protocol):
    """What the index reads of an entry (see the module docstring); entries are compared by identity."""

    @property
    def ids(self) -> Sequence[int]: ...

    @property
    def exact(self) -> int: ...

    @property
    def version(self) -> int: ...


E = TypeVar("E", bound=Indexed)


def block_keys(ids: Sequence[int], limit: int | None = None, keys: list[int] | None = None) -> list[int]:
    """The chained hash of each whole block of ``ids`` (of at most ``limit`` ids); ``keys``: those of its
    first blocks, already known (extended in place)."""
    n = len(ids) if limit is None else min(limit, len(ids))
    keys = [] if keys is None else keys
    key = keys[-1] if keys else 0
    for start in range(len(keys) * BLOCK, n - BLOCK + 1, BLOCK):
        key = hash((key, *ids[start:start + BLOCK]))
        keys.append(key)
    return keys


def common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0, end: int | None = None) -> int:
    """The length of the longest common prefix of ``a[:end]`` and ``b``, knowing the first ``start`` ids
    agree."""
    n = min(len(a) if end is None else end, len(b))
    if a[start:n] == b[start:n]:  # the usual case, at C speed
        return n
    lo, hi = start, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]: bisect with slice comparisons
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class PrefixIndex(Generic[E]):
    """Entries by the block prefixes of their ids; :meth:`longest` finds the best for a prompt."""

    def __init__(self) -> None:
        self._blocks: dict[int, set[E]] = {}
        self._keys: dict[E, tuple[int, list[int]]] = {}  # entry -> (its version then, the keys it is under)

    def put(self, entry: E) -> None:
        """Index ``entry`` under its current ids: only their new blocks if its version is the one indexed."""
        known = self._keys.get(entry)
        if known is not None and known[0] != entry.version:
            self.remove(entry)
            known = None
        keys = known[1] if known is not None else []
        have = len(keys)
        block_keys(entry.ids, entry.exact, keys)
        if not keys:
            return
        self._keys[entry] = (entry.version, keys)
        for key in keys[have:]:
            self._blocks.setdefault(key, set()).add(entry)

    def remove(self, entry: E) -> None:
        for key in self._keys.pop(entry, (0, ()))[1]:
            holders = self._blocks.get(key)
            if holders is not None:
                holders.discard(entry)
                if not holders:
                    del self._blocks[key]

    def longest(self, ids: Sequence[int], *, exclude: E | None = None, usable: Callable[[E], bool] = lambda e: True,
                rank: Callable[[E], int] = lambda e: 0) -> tuple[E | None, int, E | None]:
        """``(entry, n, blocked)``: the usable entry sharing the longest prefix with ``ids`` and that length
        (``(None, 0, ...)``: none holds a whole block of it), ties to the lowest ``rank`` (the cheapest
        tier to load from); ``blocked``: an entry ``usable`` refused that shares more (it says why not)."""
        best: E | None = None
        blocked: E | None = None
        best_n = best_depth = blocked_n = 0
        for entry, depth in self._candidates(ids):
            if depth < best_depth:  # shallower entries were indexed with fewer blocks of this prompt
                break
            if entry is exclude:
                continue
            held, end = entry.ids, entry.exact
            n = depth * BLOCK
            if end < n or held[:n] != ids[:n]:
                self.remove(entry)  # its ids changed since it was indexed (or a hash collided): not a holder
                continue
            n = common_prefix(held, ids, n, end)
            if not usable(entry):
                if n > blocked_n:
                    blocked, blocked_n = entry, n
                continue
            if n > best_n or (n == best_n and best is not None and rank(entry) < rank(best)):
                best, best_n, best_depth = entry, n, depth
        return best, best_n, blocked if blocked_n > best_n else None

    def _candidates(self, ids: Sequence[int]) -> Iterable[tuple[E, int]]:
        """Entries at the deepest block of ``ids`` any entry holds, then those one level up, and so on: a
        deeper candidate that fails its id check leaves the shallower ones."""
        chain: list[set[E]] = []
        for key in block_keys(ids):
            holders = self._blocks.get(key)
            if not holders:
                break
            chain.append(holders)
        seen: set[int] = set()
        for depth in range(len(chain), 0, -1):
            for entry in list(chain[depth - 1]):
                if id(entry) not in seen:
                    seen.add(id(entry))
                    yield entry, depth

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, entry: object) -> bool:
        return entry in self._keys
