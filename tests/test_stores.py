"""The battery every session store passes (memory, SQLite on real files, Redis on a real redis-server):
whole saves, appended patches of real turns, compare-and-set, tokens, threads.

Continued in tests/test_stores_records.py (compaction, malformed records); store-specific tests:
tests/test_stores_sqlite.py, tests/test_redis_store.py; the soak: tests/test_stores_soak.py.
"""
from __future__ import annotations

import copy
import json
import threading

import pytest

from lmchat import Session, SessionError
from lmchat.errors import StoreConflict, StoreError
from lmchat.session import patches
from lmchat.stores import VERSION_KEY, MemoryStore, Summary, open_store

from . import tokenizers_fixtures as tf


def conversation(first: str, turns: int = 1, session_id: str | None = None) -> dict:
    session = Session("qwen2.5", system="Be brief.", session_id=session_id)
    for i in range(turns):
        session.prompt(first if i == 0 else f"question {i}")
        session.commit(f"answer {i}")
    return session.to_dict()


def json_copy(value):
    return json.loads(json.dumps(value))


def first_save(store, session: Session, **extra) -> int:
    version = store.save({**session.to_dict(), **extra}, expected_version=0)
    session.mark_saved()
    return version


def turn(store, session: Session, version: int, text: str, owner: str = "") -> int:
    session.prompt(text)
    session.commit(f"answer to {text}")
    version = store.append(session.session_id, session.changes(), expected_version=version,
                           summary=Summary.of_session(session, owner))
    session.mark_saved()
    return version


# ---------------------------------------------------------------------- whole saves
def test_round_trip_restores_an_identical_session(any_store):
    data = conversation("What is the capital of France?", turns=2)
    assert any_store.save(data) == 1
    back = any_store.load(data["session_id"])
    assert back.pop(VERSION_KEY) == 1
    assert back == data
    assert Session.from_dict(back).context == Session.from_dict(data).context
    assert any_store.load("nope") is None and any_store.version("nope") == 0


def test_versions_and_compare_and_set(any_store):
    data = conversation("hi")
    sid = data["session_id"]
    assert any_store.save(data, expected_version=0) == 1  # 0: must not exist yet
    assert any_store.save(data) == 2  # no expectation: unconditional
    assert any_store.save(data, expected_version=2) == 3
    with pytest.raises(StoreConflict) as info:
        any_store.save(data, expected_version=2)
    assert (info.value.expected, info.value.actual) == (2, 3)
    assert isinstance(info.value, StoreError)
    with pytest.raises(StoreConflict):
        any_store.save(data, expected_version=0)
    assert any_store.load(sid)[VERSION_KEY] == 3 and any_store.version(sid) == 3  # the failed saves changed nothing


def test_list_latest_owner_and_delete(any_store):
    long_question = "Tell me   about\nthe history of " + "very " * 30 + "old towns"
    a = {**conversation(long_question, turns=3), "owner": "o1"}
    b = conversation("second")
    any_store.save(a)
    any_store.save(b)
    infos = any_store.list()
    assert [i.id for i in infos] == [b["session_id"], a["session_id"]]
    assert any_store.latest() == b["session_id"]
    info = infos[1]
    assert info.title.startswith("Tell me about the history of very") and info.title.endswith("…")
    assert len(info.title) == 60 and "\n" not in info.title
    assert (info.turns, info.template, info.version, info.owner) == (3, "qwen2.5", 1, "o1")
    assert [i.id for i in any_store.list(owner="o1")] == [a["session_id"]] and any_store.list(owner="nobody") == []
    any_store.save(a)  # saving again makes it the latest
    assert any_store.latest() == a["session_id"]
    assert len(any_store.list(limit=1)) == 1
    any_store.delete(a["session_id"])
    any_store.delete("absent")
    assert [i.id for i in any_store.list()] == [b["session_id"]] and any_store.list(owner="o1") == []


def test_rejects_what_is_not_a_session(any_store):
    with pytest.raises(StoreError):
        any_store.save({"messages": []})
    with pytest.raises(StoreError, match="session x is not JSON-serialisable"):
        any_store.save({"session_id": "x", "bad": object()})
    cycle: dict = {"role": "user"}
    cycle["content"] = [cycle]  # a caller's own cycle: the encoder does not look for one, recursion stops it
    with pytest.raises(StoreError, match="session x is not JSON-serialisable"):
        any_store.save({"session_id": "x", "messages": [cycle]})
    assert any_store.version("x") == 0
    version = any_store.save({"session_id": "x", "messages": []}, expected_version=0)
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        any_store.append("x", {"lists": {"messages": [0, [cycle]]}, "set": {}}, expected_version=version,
                      summary=Summary("", 0, "", ""))
    assert any_store.version("x") == version and any_store.load("x")["messages"] == []


# ---------------------------------------------------------------------- appends of real turns
def test_appended_turns_load_as_the_session_and_as_patches_apply(any_store):
    """Real turns of real sessions (one token-level): load == Session.to_dict() == the patches applied in turn."""
    for tok in (None, tf.smollm2()):
        session = Session("smollm2" if tok else "qwen2.5", system="Be brief.", tokenizer=tok)
        extra = {"owner": "hash-1", "engine": "echo:test", "chat": {"seed": 7}}
        version = first_save(any_store, session, **extra)
        reference = json_copy({**session.to_dict(), **extra})
        for i in range(12):
            session.prompt(f"question {i} " + "é中" * (i % 3))
            session.commit(f"answer {i}")
            patch = session.changes()
            if i % 4 == 3:  # a patch may set extra top-level keys too
                patch["set"]["last_turn"] = {"n": i, "cached_tokens": 3 * i}
            version = any_store.append(session.session_id, patch, expected_version=version,
                                       summary=Summary.of_session(session, "hash-1"))
            session.mark_saved()
            reference = patches.apply(reference, json_copy(patch))
            back = any_store.load(session.session_id)
            assert back.pop(VERSION_KEY) == version == i + 2
            assert back == reference
            assert {k: v for k, v in back.items() if k not in (*extra, "last_turn")} == json_copy(session.to_dict())
        restored = Session.from_dict(any_store.load(session.session_id), tokenizer=tok)
        assert restored.context == session.context and restored.turns == 12
        info = any_store.list(owner="hash-1")[0]
        assert (info.id, info.turns, info.version, info.title) == (session.session_id, 12, 13, "question 0")


def test_edits_between_turns_are_patches_too(any_store):
    """undo, reopen, reset and refused prompts: lows inside the lists, not only appends at the end."""
    session = Session("qwen2.5")
    version = first_save(any_store, session)
    ops = ["turn", "turn", "undo", "turn", "reopen", "turn", "reset", "turn", "bad", "turn"]
    for n, op in enumerate(ops):
        try:
            if op == "turn":
                session.prompt(f"q{n}")
                session.commit(f"a{n}")
            elif op == "undo":
                session.undo()
            elif op == "reopen":
                session.reopen()
                session.commit(" more")
            elif op == "reset":
                session.reset()
            else:
                session.prompt({"not": "text"})
        except (ValueError, SessionError):
            pass
        version = any_store.append(session.session_id, session.changes(), expected_version=version,
                                   summary=Summary.of_session(session))
        session.mark_saved()
        back = any_store.load(session.session_id)
        assert back.pop(VERSION_KEY) == version and back == json_copy(session.to_dict())


def test_append_conflicts_write_nothing(any_store):
    session = Session("qwen2.5")
    version = turn(any_store, session, first_save(any_store, session), "first")
    before = (any_store.load(session.session_id), any_store.list()[0], any_store.records(session.session_id))
    session.prompt("second")
    session.commit("answer")
    patch = session.changes()
    for wrong in (version - 1, version + 1):
        with pytest.raises(StoreConflict) as info:
            any_store.append(session.session_id, patch, expected_version=wrong, summary=Summary("t", 9, "x", "other"))
        assert (info.value.expected, info.value.actual, info.value.session_id) == (wrong, version, session.session_id)
    assert (any_store.load(session.session_id), any_store.list()[0], any_store.records(session.session_id)) == before
    with pytest.raises(StoreConflict) as info:  # nothing to extend
        any_store.append("absent", patch, expected_version=1, summary=Summary("t", 1, "x"))
    assert info.value.actual == 0 and any_store.version("absent") == 0


@pytest.mark.parametrize("bad", [
    [], {"lists": []}, {"lists": {"messages": [-1, []]}}, {"lists": {"messages": [0, "x"]}},
    {"lists": {"messages": [True, []]}}, {"set": {"session_id": "other"}}, {"set": {"store_version": 3}},
    {"other": 1}, {"set": {"x": object()}},
])
def test_malformed_appends_are_refused_before_anything_is_written(any_store, bad):
    session = Session("qwen2.5")
    version = first_save(any_store, session)
    with pytest.raises(StoreError, match=session.session_id):
        any_store.append(session.session_id, bad, expected_version=version, summary=Summary("t", 0, "qwen2.5"))
    with pytest.raises(StoreError, match="save"):
        any_store.append(session.session_id, {}, expected_version=0, summary=Summary("t", 0, "qwen2.5"))
    with pytest.raises(StoreError):
        any_store.append(session.session_id, {}, expected_version=version, summary=("t", 0, "qwen2.5"))
    with pytest.raises(StoreError):
        Summary("t", -1, "qwen2.5")
    assert any_store.version(session.session_id) == version and any_store.records(session.session_id).patches == 0


def test_a_retry_with_the_same_token_gets_its_own_version_back(any_store):
    session = Session("qwen2.5")
    version = first_save(any_store, session)
    session.prompt("hi")
    session.commit("hello")
    patch, summary = session.changes(), Summary.of_session(session)
    kwargs = dict(expected_version=version, summary=summary, token="idem-1")
    assert any_store.append(session.session_id, patch, **kwargs) == version + 1
    assert any_store.append(session.session_id, patch, **kwargs) == version + 1  # the retry: no second patch
    assert any_store.version(session.session_id) == version + 1
    assert any_store.load(session.session_id)["messages"] == json_copy(session.to_dict())["messages"]
    with pytest.raises(StoreConflict):  # another writer's token
        any_store.append(session.session_id, patch, **{**kwargs, "token": "idem-2"})


# ---------------------------------------------------------------------- concurrency
def test_concurrent_appenders_on_one_session_never_both_win(any_store):
    session = Session("qwen2.5")
    version = first_save(any_store, session)
    base = session.to_dict()
    threads, rounds = 6, 8
    wins: dict[int, list[int]] = {}
    errors = []

    def race(n: int, barrier: threading.Barrier, expected: int) -> None:
        try:
            barrier.wait()
            patch = {"lists": {"messages": [len(base["messages"]) + expected - 1,
                                            [{"role": "user", "content": f"thread {n} at {expected}"}]]}, "set": {}}
            wins.setdefault(any_store.append(session.session_id, patch, expected_version=expected,
                                             summary=Summary("race", expected, "qwen2.5")), []).append(n)
        except StoreConflict:
            pass
        except Exception as exc:  # surfaced below
            errors.append(exc)

    for _ in range(rounds):
        barrier = threading.Barrier(threads)
        pool = [threading.Thread(target=race, args=(n, barrier, version)) for n in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert not errors and len(wins[version + 1]) == 1, (errors, wins)
        version += 1
    messages = any_store.load(session.session_id)["messages"]
    assert [m["content"] for m in messages[len(base["messages"]):]] == [
        f"thread {wins[v][0]} at {v - 1}" for v in range(2, version + 1)]


def test_threads_never_lose_an_update(any_store):
    """Threads increment one session through load + compare-and-set, and save their own sessions."""
    shared = conversation("shared")
    any_store.save(shared)
    sid, per_thread, threads = shared["session_id"], 10, 6
    errors = []

    def work(n: int) -> None:
        try:
            own = conversation(f"thread {n}")
            for _ in range(per_thread):
                any_store.save(own)
                while True:
                    data = any_store.load(sid)
                    version = data.pop(VERSION_KEY)
                    patch = {"set": {"counter": data.get("counter", 0) + 1}}
                    try:
                        any_store.append(sid, patch, expected_version=version, summary=Summary.of(data))
                        break
                    except StoreConflict:
                        continue
        except Exception as exc:  # surfaced in the main thread below
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    final = any_store.load(sid)
    assert final["counter"] == per_thread * threads and final[VERSION_KEY] == per_thread * threads + 1
    assert len(any_store.list(limit=100)) == threads + 1
    assert all(i.version == per_thread for i in any_store.list(limit=100) if i.id != sid)


def test_open_store():
    assert isinstance(open_store("memory"), MemoryStore)
    with pytest.raises(StoreError, match="Redis stores only"):
        open_store("memory", ttl=3)


def test_copies_are_not_shared(any_store):
    data = conversation("mutable")
    any_store.save(data)
    back = any_store.load(data["session_id"])
    back["messages"].append({"role": "user", "content": "changed"})
    again = any_store.load(data["session_id"])
    assert again["messages"] == data["messages"] and copy.deepcopy(again) == again
