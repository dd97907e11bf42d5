"""The manager's additions the Responses API builds on: notes, extras, expect, edit, fork at a message, inspect, update."""
from __future__ import annotations

import pytest

from lmchat import SessionManager
from lmchat.backends import get_backend
from lmchat.errors import SessionBusy, SessionMoved, SessionNotFound
from lmchat.session.edits import restored
from lmchat.stores import MemoryStore


def manager(store=None) -> SessionManager:
    return SessionManager(get_backend("echo", prefix=""), template="qwen2.5", store=store)


def test_a_replaced_history_is_answered_from_the_new_conversation():
    mgr = manager()
    assert mgr.run_turn("s", history=[{"role": "user", "content": "first conversation"}]).text == "first conversation"
    result = mgr.run_turn("s", history=[{"role": "user", "content": "another one"}])
    assert result.text == "another one"
    assert [m["content"] for m in mgr.get("s").messages] == ["another one", "another one"]
