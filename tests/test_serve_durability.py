"""Server processes that die or share a store: SIGKILL mid-stream on SQLite, two replicas on one Redis."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402

from .serve_helpers import Server  # noqa: E402

LONG = " ".join(f"word{i}" for i in range(400))
ECHO = ("--template", "qwen2.5", "--backend-option", "prefix=")


def turn(client: httpx.Client, session_id: str, prompt: str) -> dict:
    r = client.post("/v1/chat/interactive", json={"session_id": session_id, "prompt": prompt, "interactive_mode": True})
    assert r.status_code == 200, r.text
    return r.json()


def test_sigkill_mid_stream_keeps_every_committed_turn_and_nothing_of_the_interrupted_one(tmp_path):
    args = (*ECHO, "--store", f"sqlite:{tmp_path / 'sessions.db'}", "--backend-option", "delay=0.01",
            "--max-active", "1")
    first = Server(*args)
    try:
        with httpx.Client(base_url=first.url, timeout=30) as c:
            for prompt in ("first question", "second question"):
                assert turn(c, "durable", prompt)["text"] == prompt
            with c.stream("POST", "/v1/chat/interactive", json={
                "session_id": "durable", "prompt": LONG, "interactive_mode": True, "stream": True,
            }) as r:
                streamed = r.iter_lines()
                next(streamed), next(streamed)  # the third turn is being generated
                full = c.post("/v1/chat/interactive", json={"session_id": "other", "prompt": "hi",
                                                            "interactive_mode": True})
                assert full.status_code == 429 and full.headers["retry-after"] == "1"  # --max-active 1
                first.kill()
    finally:
        first.stop()
    second = Server(*args)
    try:
        with httpx.Client(base_url=second.url, timeout=30) as c:
            got = c.get("/v1/sessions/durable").json()
            assert got["turns"] == 2
            assert [m["content"] for m in got["messages"]] == ["first question"] * 2 + ["second question"] * 2
            # the new process's engine holds nothing for the session: everything is prefilled again
            after = turn(c, "durable", "third question")
            assert after["text"] == "third question" and after["history_tokens"] == 0
            assert c.get("/v1/sessions/durable").json()["turns"] == 3
    finally:
        second.stop()


def test_sigterm_mid_stream_shuts_down_gracefully_and_saves_the_partial_answer(tmp_path):
    # the 4-second answer outlasts the half-second grace: the turn is cancelled, then saved
    args = (*ECHO, "--store", f"sqlite:{tmp_path / 'sessions.db'}", "--backend-option", "delay=0.01",
            "--shutdown-grace", "0.5")
    first = Server(*args)
    try:
        with httpx.Client(base_url=first.url, timeout=30) as c, c.stream("POST", "/v1/chat/interactive", json={
            "session_id": "graceful", "prompt": LONG, "interactive_mode": True, "stream": True,
        }) as r:
            streamed = r.iter_lines()
            next(streamed), next(streamed)
            first.proc.terminate()
            first.proc.wait(timeout=10)
    finally:
        first.stop()
    second = Server(*args)
    try:
        got = httpx.get(f"{second.url}/v1/sessions/graceful").json()
        answer = got["messages"][-1]["content"]
        assert got["turns"] == 1 and answer and LONG.startswith(answer) and len(answer) < len(LONG)
    finally:
        second.stop()


def test_two_replicas_on_one_redis_continue_each_others_sessions(own_redis):
    pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'lmchat[redis]')")
    a, b = Server(*ECHO, "--store", own_redis.url), None
    try:
        b = Server(*ECHO, "--store", own_redis.url)
        ca, cb = (openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0) for s in (a, b))
        messages = [{"role": "user", "content": "asked on replica A"}]

        def ask(client, question: str):
            if messages[-1]["role"] == "assistant":
                messages.append({"role": "user", "content": question})
            r = client.chat.completions.create(model="m", messages=messages, extra_body={"session_id": "shared"})
            messages.append({"role": "assistant", "content": r.choices[0].message.content})
            return r

        ask(ca, "asked on replica A")
        assert ask(cb, "asked on replica B").choices[0].message.content == "asked on replica B"
        assert ask(ca, "back on replica A").choices[0].message.content == "back on replica A"  # A reloads B's turn
        for server in (a, b):
            stored = httpx.get(f"{server.url}/v1/sessions/shared").json()["messages"]
            assert [m["content"] for m in stored] == [m["content"] for m in messages]
        own_redis.kill()
        assert httpx.get(f"{a.url}/health").status_code == 503
        down = httpx.post(f"{b.url}/v1/chat/completions", json={"messages": messages, "session_id": "shared"})
        assert down.status_code == 503 and down.json()["error"]["code"] == "store_unavailable"
        assert httpx.get(f"{a.url}/v1/models").status_code == 200  # the servers themselves stay up
    finally:
        a.stop()
        if b is not None:
            b.stop()
