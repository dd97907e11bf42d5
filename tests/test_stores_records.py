"""The battery every store passes, continued: compaction (geometric, invisible, safe against concurrent
appends and saves; random interleavings against a reference dict), malformed records, delete and close."""
from __future__ import annotations

import functools
import itertools
import json
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmchat import Session
from lmchat.errors import StoreConflict, StoreError
from lmchat.session import patches
from lmchat.stores import VERSION_KEY, MemoryStore, SQLiteStore, Summary, records
from lmchat.stores.records import COMPACT_AFTER, fold

from .hypothesis_profiles import examples
from .store_helpers import open_kind
from .test_stores import conversation, first_save, json_copy, turn


# ---------------------------------------------------------------------- compaction
@pytest.fixture
def no_floor(monkeypatch):
    """Compaction by the factor alone: the geometric rule shows from the first turns."""
    monkeypatch.setattr(records, "COMPACT_FLOOR", 0)


def test_compaction_happens_geometrically_and_is_invisible(any_store, no_floor):
    session = Session("qwen2.5", system="You are a helpful assistant.")
    version = first_save(any_store, session)
    bases, compactions = [], 0
    for i in range(150):
        version = turn(any_store, session, version, f"Question number {i}: what is {i} + {i}? Explain briefly.")
        info = any_store.records(session.session_id)
        assert info.version == version and info.patches == version - info.base_version
        # the rule: fold as soon as the patches outgrow COMPACT_AFTER times the base
        assert info.patch_chars <= COMPACT_AFTER * info.base_chars
        if not bases or info.base_version != bases[-1]:
            bases.append(info.base_version)
            compactions += 1
        if i % 25 == 0:
            assert any_store.load(session.session_id) == {**json_copy(session.to_dict()), VERSION_KEY: version}
    assert 3 <= compactions <= 10  # about log3(150 turns / the first base's size in turns)
    gaps = [b - a for a, b in itertools.pairwise(bases)]
    assert gaps == sorted(gaps) and gaps[-1] >= 2 * gaps[1]  # each base holds about 1 + COMPACT_AFTER times the last
    assert any_store.compact(session.session_id) is True and any_store.compact(session.session_id) is False
    assert any_store.records(session.session_id).patches == 0
    assert any_store.load(session.session_id) == {**json_copy(session.to_dict()), VERSION_KEY: version}
    assert any_store.compact("absent") is False


def test_awaited_appends_compact_the_same_way_in_the_background(any_store, no_floor):
    """``aappend`` (a turn on the event loop): the append lands when it returns; the compaction it makes due
    runs in a worker thread that the turn does not wait for, and folds what a blocking append would."""
    import asyncio

    session = Session("qwen2.5", system="You are a helpful assistant.")
    version = first_save(any_store, session)

    async def main() -> int:
        nonlocal version
        compactions, base = 0, any_store.records(session.session_id).base_version
        for i in range(150):
            session.prompt(f"Question number {i}: what is {i} + {i}? Explain briefly.")
            session.commit(f"answer to {i}")
            version = await any_store.aappend(session.session_id, session.changes(), expected_version=version,
                                              summary=Summary.of_session(session))
            session.mark_saved()
            assert any_store.version(session.session_id) == version  # durable before any compaction
            await asyncio.to_thread(records.compactions_idle)
            info = any_store.records(session.session_id)
            assert info.patch_chars <= COMPACT_AFTER * info.base_chars and not records._COMPACTING
            compactions += info.base_version != base
            base = info.base_version
            if i % 25 == 0:
                assert any_store.load(session.session_id) == {**json_copy(session.to_dict()), VERSION_KEY: version}
        return compactions

    assert 3 <= asyncio.run(main()) <= 10
    assert any_store.load(session.session_id) == {**json_copy(session.to_dict()), VERSION_KEY: version}


def test_a_short_session_is_not_compacted_until_its_patches_pass_the_floor(any_store):
    """A new session's base is small: by the factor alone, its first turns would be folded again and again."""
    session = Session("qwen2.5")
    version = first_save(any_store, session)
    past_the_factor = 0  # appends left unfolded although the patches outgrew COMPACT_AFTER times the base
    for i in range(200):
        version = turn(any_store, session, version, f"Question number {i}: what is {i} + {i}? Explain briefly.")
        info = any_store.records(session.session_id)
        if info.base_version != 1:
            break
        assert info.patch_chars <= records.COMPACT_FLOOR
        past_the_factor += info.patch_chars > COMPACT_AFTER * info.base_chars
    else:
        raise AssertionError("never compacted")
    # folded by the append that took the patches past the floor
    assert info.version == version and info.patches == 0 and past_the_factor > 5
    assert any_store.load(session.session_id) == {**json_copy(session.to_dict()), VERSION_KEY: version}


def test_background_compactions_queue_one_per_session(any_store):
    """While the compaction thread is busy, a session whose appends keep making a fold due queues one."""
    import asyncio
    import threading

    session = Session("qwen2.5")
    version = first_save(any_store, session)
    release = threading.Event()
    records._COMPACTOR.submit(release.wait, 10)  # the compaction thread is busy

    async def main() -> int:
        nonlocal version
        for i in range(40):
            session.prompt(f"question {i} " * 20)
            session.commit(f"answer {i} " * 20)
            version = await any_store.aappend(session.session_id, session.changes(), expected_version=version,
                                              summary=Summary.of_session(session))
            session.mark_saved()
        return version

    try:
        asyncio.run(main())
        assert {(id(any_store), session.session_id)} == records._COMPACTING
        assert any_store.records(session.session_id).base_version == 1  # nothing folded yet
    finally:
        release.set()
    records.compactions_idle()
    info = any_store.records(session.session_id)
    assert info.base_version > 1 and not records._COMPACTING
    assert any_store.load(session.session_id) == {**json_copy(session.to_dict()), VERSION_KEY: version}


def test_a_compaction_keeps_appends_made_while_it_folded_and_yields_to_saves(any_store):
    """The interleavings a concurrent compaction meets, played in order on the store's own steps."""
    session = Session("qwen2.5")
    version = first_save(any_store, session)
    for i in range(3):
        version = turn(any_store, session, version, f"q{i}")
    read = any_store._read(session.session_id)  # a compaction reads...
    version = turn(any_store, session, version, "meanwhile")  # ...another writer appends...
    folded = json.dumps(fold(session.session_id, read))
    assert any_store._install(session.session_id, read.tag, read.version, folded, sum(map(len, read.patches)))
    assert any_store.records(session.session_id).patches == 1  # the append made meanwhile stays, on the new base
    assert any_store.load(session.session_id) == {**json_copy(session.to_dict()), VERSION_KEY: version}
    assert not any_store._install(session.session_id, read.tag, read.version, folded, 0)  # that base is gone now
    read = any_store._read(session.session_id)
    any_store.save(session.to_dict(), expected_version=version)  # a whole save replaces the base
    assert not any_store._install(session.session_id, read.tag, read.version, "{}", 0)
    assert any_store.load(session.session_id)["messages"] == json_copy(session.to_dict())["messages"]


OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["messages", "context", "offsets", "notes"]),
              st.floats(0, 1), st.lists(st.one_of(st.integers(), st.text(max_size=30),
                                                  st.dictionaries(st.sampled_from("ab"), st.integers())),
                                        max_size=6),
              st.dictionaries(st.sampled_from(["tail", "owner", "last_turn", "engine"]), st.integers() | st.text())),
    st.tuples(st.sampled_from(["save", "compact", "load", "stale", "interleaved"])),
), min_size=1, max_size=25)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, data=st.data())
def test_random_interleavings_equal_a_reference_dict(any_store, ops, data):
    reference = json_copy({**conversation("start", turns=2), "owner": "o", "notes": ["n0"]})
    sid = reference["session_id"]
    version = any_store.save(reference, expected_version=0)
    pending = None  # an interleaved compaction's read, installed after the next append

    def patch_for(key, fraction, items, sets):
        low = int(fraction * len(reference.get(key) or []))
        return {"lists": {key: [low, items]}, "set": sets}

    for op in ops:
        kind = op[0]
        if kind in ("append", "stale"):
            patch = patch_for(*op[1:]) if kind == "append" else patch_for("messages", 1.0, [{"role": "x"}], {})
            summary = Summary(f"t{version}", version, "qwen2.5", "o")
            if kind == "stale":
                with pytest.raises(StoreConflict):
                    wrong = version + data.draw(st.sampled_from([1, -1])) if version > 1 else version + 1
                    any_store.append(sid, patch, expected_version=wrong, summary=summary)
                continue
            version = any_store.append(sid, patch, expected_version=version, summary=summary)
            reference = patches.apply(reference, json_copy(patch))
            if pending is not None:
                any_store._install(sid, pending.tag, pending.version, json.dumps(fold(sid, pending)),
                                   sum(map(len, pending.patches)))
                pending = None
        elif kind == "save":
            reference = {**reference, "tail": version}
            version = any_store.save(reference, expected_version=version)
        elif kind == "compact":
            any_store.compact(sid)
        elif kind == "interleaved":
            pending = any_store._read(sid)
        assert any_store.load(sid) == {**reference, VERSION_KEY: version}
        assert any_store.version(sid) == version
    info = any_store.records(sid)
    assert info.patches == version - info.base_version
    any_store.delete(sid)


# ---------------------------------------------------------------------- malformed records
def corrupt(store, sid: str, what: str, value: str) -> None:
    """Write ``value`` as the stored base or first patch, behind the store's back."""
    if isinstance(store, MemoryStore):
        row = store._rows[sid]
        if what == "base":
            row.base = value
        else:
            row.patches[0] = value
    elif isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.path)
        if what == "base":
            conn.execute("UPDATE bases SET data = ? WHERE id = ?", (value, sid))
        else:
            conn.execute("UPDATE patches SET data = ? WHERE id = ?", (value, sid))  # the only one
        conn.commit()
        conn.close()
    else:
        if what == "base":
            store._client.hset(store._key(sid), "data", value)
        else:
            store._client.lset(store._patches_key(sid), 0, value)


@pytest.mark.parametrize("what,value", [
    ("base", "{not json"), ("base", "[1, 2]"), ("patch", "{not json"), ("patch", "[1]"),
    ("patch", '{"lists": {"messages": [999, []]}}'), ("patch", '{"lists": {"messages": 3}}'),
    ("patch", '{"lists": {"system": [0, []]}}'), ("patch", '{"set": []}'),
])
def test_malformed_records_raise_store_errors_naming_the_session(any_store, what, value):
    session = Session("qwen2.5", system="Be brief.")
    version = turn(any_store, session, first_save(any_store, session), "hi")
    any_store.compact(session.session_id)
    version = turn(any_store, session, version, "again")
    assert any_store.records(session.session_id).patches == 1
    corrupt(any_store, session.session_id, what, value)
    with pytest.raises(StoreError, match=session.session_id):
        any_store.load(session.session_id)
    with pytest.raises(StoreError, match=session.session_id):
        any_store.compact(session.session_id)
    # the records stay as they were; the next append still lands (its compaction, when due, is what fails)
    assert any_store.version(session.session_id) == version


def test_a_closed_store_refuses_every_call(request, tmp_path):
    for kind in ("memory", "sqlite"):
        store = open_kind(kind, request, tmp_path / kind)
        data = conversation("x")
        store.save(data)
        store.close()
        for call in (functools.partial(store.load, data["session_id"]), functools.partial(store.save, data),
                     store.list, functools.partial(store.version, "x"), functools.partial(store.delete, "x"),
                     functools.partial(store.append, "x", {}, expected_version=1, summary=Summary("", 0, ""))):
            with pytest.raises(StoreError, match="closed"):
                call()
        store.close()  # twice is fine


def test_delete_removes_the_base_and_the_patches(any_store):
    session = Session("qwen2.5")
    version = first_save(any_store, session)
    for i in range(5):
        version = turn(any_store, session, version, f"q{i}")
    any_store.delete(session.session_id)
    assert any_store.records(session.session_id) is None and any_store.load(session.session_id) is None
    fresh = Session("qwen2.5", session_id=session.session_id, system="again")
    assert first_save(any_store, fresh) == 1  # no stale patch comes back under the same id
    assert any_store.load(session.session_id) == {**json_copy(fresh.to_dict()), VERSION_KEY: 1}
    assert any_store.records(session.session_id).patches == 0




def break_records(store, sid: str, how: str) -> bool:
    """Make a session's records inconsistent behind the store's back; False where the store cannot be."""
    if isinstance(store, MemoryStore):
        if how != "patch missing":
            return False
        store._rows[sid].patches.pop()
    elif isinstance(store, SQLiteStore):
        sql = {"patch missing": "DELETE FROM patches WHERE id = ?", "base missing": "DELETE FROM bases WHERE id = ?",
               "version not a number": "UPDATE sessions SET version = 'seven' WHERE id = ?"}[how]
        conn = sqlite3.connect(store.path)
        conn.execute(sql, (sid,))
        conn.commit()
        conn.close()
    elif how == "patch missing":
        store._client.delete(store._patches_key(sid))
    elif how == "base missing":
        store._client.hdel(store._key(sid), "data")
    else:
        store._client.hset(store._key(sid), "version", "seven")
    return True


@pytest.mark.parametrize("how", ["patch missing", "base missing", "version not a number"])
def test_inconsistent_records_raise_store_errors_naming_the_session(any_store, how):
    session = Session("qwen2.5", system="Be brief.")
    version = turn(any_store, session, first_save(any_store, session), "hi")
    any_store.compact(session.session_id)
    turn(any_store, session, version, "again")
    if not break_records(any_store, session.session_id, how):
        pytest.skip(f"{type(any_store).__name__} keeps its records in this process: they cannot be {how!r}")
    with pytest.raises(StoreError, match=session.session_id):
        any_store.load(session.session_id)
    if how == "version not a number":
        for call in (lambda: any_store.version(session.session_id), lambda: any_store.compact(session.session_id),
                     lambda: any_store.save(session.to_dict(), expected_version=3),
                     lambda: any_store.append(session.session_id, {}, expected_version=3, summary=Summary("", 0, ""))):
            with pytest.raises(StoreError, match=f"{session.session_id}.*not a number") as info:
                call()
            assert not isinstance(info.value, StoreConflict)
