"""The exact prefix index of the llama.cpp engine (pure Python: no model needed).

Property: whatever entries hold and however they change after being indexed,
``longest`` returns an entry and a length such that the entry's first ``n`` ids
equal the prompt's, never past the entry's ``exact`` ids, and no indexed entry
shares a longer prefix of whole blocks.
"""
from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from lmchat.backends.llamacpp.prefix import BLOCK, PrefixIndex, block_keys, common_prefix

from .hypothesis_profiles import examples


@attrs.define(eq=False)
class Entry:
    ids: list[int]
    limit: int | None = None
    version: int = 0
    tier: str = "resident"

    @property
    def exact(self) -> int:
        return len(self.ids) if self.limit is None else min(self.limit, len(self.ids))


def brute(entries, ids):
    """The longest common prefix any entry holds, among those holding a whole block of it."""
    best = 0
    for e in entries:
        n = common_prefix(e.ids, ids, 0, e.exact)
        if n >= BLOCK:
            best = max(best, n)
    return best


ids_st = st.lists(st.integers(0, 3), min_size=0, max_size=5 * BLOCK)  # a tiny alphabet: many shared prefixes


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(ids_st, st.one_of(st.none(), st.integers(0, 5 * BLOCK))), max_size=6), ids_st,
       st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["grow", "cut", "replace"]), ids_st), max_size=4))
def test_longest_is_exact_and_maximal(held, prompt, changes):
    index, entries = PrefixIndex(), []
    for ids, limit in held:
        e = Entry(list(ids), limit)
        entries.append(e)
        index.put(e)
    changed = set()
    for i, kind, more in changes:  # entries change behind the index's back, as sequences do
        if not entries:
            break
        e = entries[i % len(entries)]
        changed.add(id(e))
        if kind == "grow":
            e.ids.extend(more)  # indexed prefixes stay true
        elif kind == "cut":
            del e.ids[len(e.ids) // 2:]
        else:
            e.ids = list(more)
    entry, n, _ = index.longest(prompt)
    if entry is not None:
        assert entry.ids[:n] == prompt[:n] and n <= entry.exact
    # entries that hold what they were indexed with are all found: the answer is maximal among them
    assert n >= brute([e for e in entries if id(e) not in changed], prompt)
    if not changed:
        assert n == brute(entries, prompt)


def test_put_again_hashes_only_new_blocks_and_a_new_version_rehashes():
    index = PrefixIndex()
    e = Entry(list(range(2 * BLOCK)))
    index.put(e)
    e.ids.extend(range(100, 100 + BLOCK))
    index.put(e)
    assert index.longest(e.ids)[:2] == (e, 3 * BLOCK)
    e.ids = [7] * (2 * BLOCK)
    e.version += 1
    index.put(e)
    assert index.longest(list(range(3 * BLOCK)))[0] is None
    assert index.longest([7] * (3 * BLOCK))[:2] == (e, 2 * BLOCK)


def test_ties_go_to_the_cheapest_tier_and_blocked_entries_say_why():
    index = PrefixIndex()
    disk, host = Entry(list(range(3 * BLOCK)), tier="disk"), Entry(list(range(3 * BLOCK)), tier="host")
    foreign = Entry(list(range(5 * BLOCK)), tier="disk")
    for e in (disk, host, foreign):
        index.put(e)
    rank = {"resident": 0, "host": 1, "disk": 2}
    entry, n, blocked = index.longest(list(range(6 * BLOCK)), usable=lambda e: e is not foreign,
                                      rank=lambda e: rank[e.tier])
    assert (entry, n, blocked) == (host, 3 * BLOCK, foreign)
    # the exclusion of the asking sequence itself
    assert index.longest(list(range(3 * BLOCK)), exclude=host, usable=lambda e: e is not foreign,
                         rank=lambda e: rank[e.tier])[0] is disk


def test_the_exact_bound_and_the_block_floor():
    index = PrefixIndex()
    shifted = Entry(list(range(4 * BLOCK)), limit=BLOCK + 5)  # a context shift after BLOCK + 5 ids
    index.put(shifted)
    assert index.longest(list(range(4 * BLOCK)))[:2] == (shifted, BLOCK + 5)
    short = PrefixIndex()
    short.put(Entry(list(range(BLOCK - 1))))
    assert short.longest(list(range(BLOCK - 1))) == (None, 0, None)  # less than a block is never indexed


def test_block_keys_chain_and_common_prefix():
    a = list(range(3 * BLOCK))
    b = a[:BLOCK] + [-1] + a[BLOCK + 1:]
    ka, kb = block_keys(a), block_keys(b)
    assert ka[0] == kb[0] and ka[1] != kb[1] and ka[2] != kb[2]  # a change reaches every later block
    assert common_prefix(a, b) == BLOCK and common_prefix(a, a) == len(a) and common_prefix(a, a, 0, 5) == 5
    assert common_prefix(a, b, BLOCK) == BLOCK and common_prefix([], a) == 0
