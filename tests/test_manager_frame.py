"""A turn's edit as data (``lmchat.manager.frame.Frame``): what a caller decided from what it read, applied by the
manager when the turn starts, on the echo engine."""
from __future__ import annotations

import pytest

from lmchat import SessionManager
from lmchat.backends import get_backend
from lmchat.errors import InvalidMessages
from lmchat.manager import TurnRequest
from lmchat.manager.frame import Frame
from lmchat.stores import MemoryStore


def manager(store=None) -> SessionManager:
    return SessionManager(get_backend("echo", prefix=""), template="qwen2.5", store=store)


def frame(system="first", **changes) -> Frame:
    fields = dict(system=system, head=True, tools=None, switches={}, clears=("enable_thinking",), overflow="error",
                  extra=None, reframed_extra=None, tokenizer=None)
    return Frame(**{**fields, **changes})


def user(text):
    return [{"role": "user", "content": text}]


def session_with_a_turn(store=None):
    mgr = manager(store)
    sid = mgr.create(system="first", extra={"n": 0})
    mgr.run_turn(TurnRequest(sid, user("one")))
    return mgr, sid


def test_a_frame_the_session_has_changes_nothing_and_keeps_the_cache():
    mgr, sid = session_with_a_turn()
    before = mgr.get(sid).to_dict()
    result = mgr.run_turn(TurnRequest(sid, user("two"), edit=frame()))
    assert result.cache_miss_reason is None and result.reused > 0
    assert mgr.inspect(sid, lambda v: v.extra) == {"n": 0}
    assert mgr.get(sid).to_dict()["messages"][:3] == before["messages"]


def test_another_system_prompt_replaces_the_head_resets_and_writes_its_extra():
    store = MemoryStore()
    mgr, sid = session_with_a_turn(store)
    result = mgr.run_turn(TurnRequest(sid, user("two"), edit=frame("second", extra={"n": 1},
                                                                     reframed_extra={"n": 2})))
    assert result.cache_miss_reason == "the instructions changed"
    contents = [m["content"] for m in mgr.get(sid).messages]
    assert contents == ["second", "one", "one", "two", "two"]
    assert store.load(sid)["extra"] == {"n": 2}  # the system prompt changed: the reframed extra


def test_the_same_system_prompt_writes_the_extra_for_it_and_switches_reset_with_their_reason():
    mgr, sid = session_with_a_turn()
    result = mgr.run_turn(TurnRequest(sid, user("two"), edit=frame(switches={"enable_thinking": False},
                                                                     extra={"n": 1}, reframed_extra={"n": 2})))
    assert result.cache_miss_reason == "the reasoning setting changed"
    assert mgr.get(sid).template_kwargs == {"enable_thinking": False}
    assert mgr.inspect(sid, lambda v: v.extra) == {"n": 1}
    # cleared again: the switch goes, and so does the cache
    result = mgr.run_turn(TurnRequest(sid, user("three"), edit=frame()))
    assert result.cache_miss_reason == "the reasoning setting changed" and mgr.get(sid).template_kwargs == {}


def test_a_frame_is_applied_only_if_the_turn_starts():
    store = MemoryStore()
    mgr, sid = session_with_a_turn(store)
    before = store.load(sid)
    with pytest.raises(InvalidMessages, match="robot"):  # an unknown role: the turn does not start
        mgr.run_turn(TurnRequest(sid, [{"role": "robot", "content": "x"}], edit=frame("second", extra={"n": 1},
                                                                                      reframed_extra={"n": 2})))
    assert store.load(sid) == before and mgr.get(sid).messages[0]["content"] == "first"
