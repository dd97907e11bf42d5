"""lmchat.serve's routes called in this process (the ``app_client`` fixture, tests/conftest.py): the same app
``lmchat serve`` runs, without a server process, so a failure here can be debugged in the app's code. Most server
tests run so (``InProcess``, tests/serve_helpers.py); what needs the process itself (signals, sockets, clients that
disconnect, startup) runs the real server (``Server``)."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")


def test_health_names_the_backend_and_the_store(app_client):
    r = app_client.get("/health")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok" and body["backend"] == "echo"
    assert body["sessions_in_memory"] == 0 and body["sessions_active"] == 0


def test_a_chat_completion_on_the_echo_backend_is_answered_and_stored(app_client):
    r = app_client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hello"}],
                                                      "session_id": "s1"})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "hello"} and choice["finish_reason"] == "stop"
    # the turn went through the manager into the store: the session holds the exchange
    stored = app_client.get("/v1/sessions/s1")
    assert stored.status_code == 200, stored.text
    manager = app_client.app.state.manager
    assert [m["content"] for m in manager.get("s1").messages] == ["hello", "hello"]
