"""The manager's additions the Responses API builds on: notes, extras, expect, edit, fork at a
message, inspect, update."""
from __future__ import annotations

import pytest

from lmchat import SessionManager
from lmchat.backends import get_backend
from lmchat.errors import InvalidMessages, SessionBusy, SessionMoved, SessionNotFound
from lmchat.manager import TurnRequest
from lmchat.session.edits import restored
from lmchat.stores import MemoryStore


def manager(store=None) -> SessionManager:
    return SessionManager(get_backend("echo", prefix=""), template="qwen2.5", store=store)


def test_a_replaced_history_is_answered_from_the_new_conversation():
    mgr = manager()
    first = mgr.run_turn(TurnRequest("s", history=[{"role": "user", "content": "first conversation"}]))
    assert first.text == "first conversation"
    result = mgr.run_turn(TurnRequest("s", history=[{"role": "user", "content": "another one"}]))
    assert result.text == "another one"
    assert [m["content"] for m in mgr.get("s").messages] == ["another one", "another one"]


def with_system(view, text):
    data = view.session.to_dict()
    data["messages"] = [{"role": "system", "content": text}] + [m for m in data["messages"] if m["role"] != "system"]
    data["system"] = text
    return restored(data, None, "the system prompt changed")


def test_notes_and_extra_are_saved_with_the_turn_and_reloaded(tmp_path):
    from lmchat.stores.sqlite import SQLiteStore

    path = tmp_path / "s.db"
    mgr = manager(SQLiteStore(path))
    sid = mgr.create(owner="k", extra={"kind": "test"})
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "one"}], owner="k", note={"n": 1}))
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "two"}], owner="k"))  # no note
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "three"}], owner="k", note={"n": 3}))
    mgr.close()
    again = manager(SQLiteStore(path))
    view = again.inspect(sid, lambda v: v, owner="k")
    # 3 exchanges (Qwen2.5 renders its default system prompt itself)
    assert view.extra == {"kind": "test"} and view.messages == 6
    assert [n["n"] for n in view.notes] == [1, 3]
    turn = view.notes[1]["turn"]
    assert "text" not in turn and turn["finish_reason"] == "stop" and turn["prefilled"] > 0
    with pytest.raises(SessionNotFound):
        again.inspect(sid, lambda v: v, owner="someone else")


def test_expect_runs_a_turn_only_on_the_version_read():
    mgr = manager()
    sid = mgr.create()
    version = mgr.inspect(sid, lambda v: v.version)
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "one"}], expect=version))
    with pytest.raises(SessionMoved):
        mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "two"}], expect=version))
    assert mgr.get(sid).turns == 1
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "two"}], expect=version + 1))


def test_an_edit_replaces_the_session_only_when_its_turn_starts():
    store = MemoryStore()
    mgr = manager(store)
    sid = mgr.create(system="first")
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "one"}]))
    before = store.load(sid)
    with pytest.raises(InvalidMessages, match="robot"):  # an unknown role: the turn does not start
        mgr.run_turn(TurnRequest(sid, [{"role": "robot", "content": "x"}],
                     edit=lambda v: (with_system(v, "second"), {"edited": True})))
    assert mgr.get(sid).messages[0]["content"] == "first" and store.load(sid) == before
    assert mgr.inspect(sid, lambda v: v.extra) == {}
    result = mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "two"}],
                          edit=lambda v: (with_system(v, "second"), {"edited": True})))
    assert result.cache_miss_reason == "the system prompt changed"
    assert mgr.get(sid).messages[0]["content"] == "second"
    assert store.load(sid)["extra"] == {"edited": True}


def test_fork_at_a_message_keeps_the_conversation_up_to_it_and_not_the_notes():
    mgr = manager()
    sid = mgr.create(extra={"kind": "parent"})
    for word in ("one", "two", "three"):
        mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": word}], note={"w": word}))
    branch = mgr.fork(sid, at=4, extra={"kind": "branch"})  # one, answer, two, answer
    view = mgr.inspect(branch, lambda v: v)
    assert view.messages == 4 and view.notes == [] and view.extra == {"kind": "branch"}
    result = mgr.run_turn(TurnRequest(branch, [{"role": "user", "content": "four"}]))
    assert result.reused == 0 and "forked from session" in result.cache_miss_reason and "at message 4" in \
        result.cache_miss_reason
    assert [m["content"] for m in mgr.get(branch).messages] == ["one", "one", "two", "two", "four", "four"]
    assert mgr.get(sid).turns == 3


def test_update_changes_extra_or_the_session_between_turns_and_waits_for_no_turn():
    mgr = manager()
    sid = mgr.create()
    version = mgr.update(sid, lambda v: (None, {**v.extra, "metadata": {"a": "b"}}))
    assert mgr.inspect(sid, lambda v: (v.extra, v.version)) == ({"metadata": {"a": "b"}}, version)
    assert mgr.update(sid, lambda v: None) == version  # nothing to change: nothing saved
    with pytest.raises(SessionMoved):
        mgr.update(sid, lambda v: (None, {}), expect=version - 1)
    stream = mgr.stream_turn(TurnRequest(sid, [{"role": "user", "content": "a turn in progress"}]))
    with pytest.raises(SessionBusy):
        mgr.update(sid, lambda v: (None, {}))
    # mid-turn, inspect reads the last commit from the store
    assert mgr.inspect(sid, lambda v: (v.messages, v.extra)) == (0, {"metadata": {"a": "b"}})
    list(stream)
    assert mgr.inspect(sid, lambda v: v.messages) == 2
