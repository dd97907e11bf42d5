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


def test_health_answers_while_the_engine_is_busy():
    """/health answers a load balancer from the manager's own counts: an engine whose stats wait for its current
    step (llama.cpp reads them between two steps, a long prompt's step takes seconds) does not hold it up, where
    /health waited for mgr.metrics() on the event loop (2.6 s behind a schema's first step; issue 35)."""
    import threading

    from starlette.testclient import TestClient

    from lmchat.backends.echo import EchoBackend
    from lmchat.manager import SessionManager
    from lmchat.serve.app import create_app

    step = threading.Event()  # the engine's current step: stats answer once it ends
    order: list[str] = []

    class BusyEngine(EchoBackend):
        """Echo with a prefix cache whose stats wait for the step in progress."""

        def cached(self, session_id, ids):
            return 0, None

        def stats(self):
            step.wait(timeout=30)
            order.append("stats")
            return {}

        def awaiting_tools(self, session_id):
            pass

        def rewind(self, session_id, start, count, canonical):
            pass

    ends = threading.Timer(5.0, lambda: (order.append("step ended"), step.set()))
    ends.start()
    try:
        with TestClient(create_app(SessionManager(BusyEngine(), template="qwen2.5"))) as client:
            r = client.get("/health")
            order.append("health")
            assert r.status_code == 200 and r.json()["sessions_active"] == 0, r.text
            assert order == ["health"], order  # answered before the engine's step ended, without its stats
            step.set()
            metrics = client.get("/metrics")  # /metrics does read the engine: once its step is over
            assert metrics.status_code == 200 and order[-1] == "stats", order
    finally:
        ends.cancel()
