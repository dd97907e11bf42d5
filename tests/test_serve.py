"""`lmchat serve` through the real `openai` client: chat (whole, streamed), tools, session reuse, keys, errors.
The command's app in this process (``InProcess``, tests/serve_helpers.py)."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402

from lmchat import Session  # noqa: E402

from .serve_helpers import InProcess  # noqa: E402

K1, K2 = "key-one", "key-two"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
# the echo backend (prefix '') answers the last user message: this one is a Qwen2.5 (hermes) tool call
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("serve") / "sessions.db"
    s = InProcess("--template", "qwen2.5", "--store", f"sqlite:{db}", "--backend-option", "prefix=",
               "--max-body-bytes", "200000", keys=(K1, K2))
    yield s
    s.stop()


@pytest.fixture
def client(server):
    return server.openai(K1)


def http(server, key=K1) -> httpx.Client:
    return server.client(key)


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list()] == ["qwen2.5"]
    assert server.client().get("/health").json() == {"status": "ok"}  # no key: load balancers probe it
    health = http(server).get("/health").json()  # a key also sees the engine, the store, the load
    assert health["status"] == "ok" and health["backend"] == "echo" and health["sessions_active"] == 0


def test_chat_completion_whole_and_streamed(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, how are you?"}]
    r = client.chat.completions.create(model="qwen2.5", messages=messages)
    assert r.choices[0].message.content == "Hello, how are you?"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    stream = client.chat.completions.create(model="qwen2.5", messages=messages, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello, how are you?"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_tool_calls_whole_then_the_tool_result_in_the_same_session(client, server):
    messages = [{"role": "user", "content": CALL}]
    r = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, extra_body={"session_id": "tools-1"})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "22 C, sunny"}]
    r2 = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, extra_body={"session_id": "tools-1"})
    assert r2.choices[0].message.tool_calls[0].function.name == "get_weather"  # echo repeats the last user message
    assert r2.usage.prompt_tokens_details.cached_tokens > 0  # the tool turn extended the session's cache
    stored = http(server).get("/v1/sessions/tools-1").json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_tool_calls_streamed_as_openai_deltas(client):
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": CALL}], tools=TOOLS,
                                            stream=True)
    names, arguments, finish = [], "", None
    for chunk in stream:
        delta = chunk.choices[0].delta
        for call in delta.tool_calls or []:
            if call.function.name:
                names.append((call.index, call.id, call.function.name))
            arguments += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert [(i, n) for i, _, n in names] == [(0, "get_weather")] and names[0][1]
    assert json.loads(arguments) == {"city": "Paris"} and finish == "tool_calls"


def test_resent_history_reuses_the_session_and_an_edited_history_resets_it(client, server):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    first = client.chat.completions.with_raw_response.create(model="m", messages=messages,
                                                             extra_headers={"X-Session-Id": "reuse-1"})
    assert first.headers["x-session-id"] == "reuse-1"
    messages += [{"role": "assistant", "content": first.parse().choices[0].message.content},
                 {"role": "user", "content": "And of Italy?"}]
    second = client.chat.completions.create(model="m", messages=messages, user="reuse-1")  # `user` names it too
    assert second.choices[0].message.content == "And of Italy?"
    assert second.usage.prompt_tokens_details.cached_tokens > second.usage.prompt_tokens // 2
    assert len(http(server).get("/v1/sessions/reuse-1").json()["messages"]) == 4
    edited = [{"role": "user", "content": "What is the capital of Spain?"}] + messages[1:]
    third = client.chat.completions.create(model="m", messages=edited, extra_body={"session_id": "reuse-1"})
    assert third.usage.prompt_tokens_details.cached_tokens == 0  # reset: the engine's cache was dropped
    stored = http(server).get("/v1/sessions/reuse-1").json()["messages"]
    assert [m["content"] for m in stored] == [m["content"] for m in edited] + ["And of Italy?"]


def test_api_keys_own_their_sessions(server, client):
    with pytest.raises(openai.AuthenticationError):
        server.openai("wrong").models.list()
    unauthenticated = server.client().get("/v1/sessions")
    assert unauthenticated.status_code == 401 and unauthenticated.json()["error"]["code"] == "invalid_api_key"
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "secret"}],
                                   extra_body={"session_id": "private-1"})
    other = http(server, K2)
    assert other.get("/v1/sessions/private-1").status_code == 404
    assert "private-1" not in [s["id"] for s in other.get("/v1/sessions").json()["data"]]
    assert "private-1" in [s["id"] for s in http(server).get("/v1/sessions").json()["data"]]
    assert other.delete("/v1/sessions/private-1").status_code == 404
    # the same id under another key is another session: no squatting, and no way to tell the first exists
    same_id = other.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                       "session_id": "private-1"})
    assert same_id.status_code == 200
    assert [m["content"] for m in other.get("/v1/sessions/private-1").json()["messages"]][-2:] == ["x", "x"]
    mine = http(server).get("/v1/sessions/private-1").json()["messages"]
    assert [m["content"] for m in mine][-2:] == ["secret", "secret"]
    # the interactive route checks keys the same way
    body = {"session_id": "private-1", "prompt": "mine?", "interactive_mode": True}
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {K2}"}):
        refused = server.client().post("/v1/chat/interactive", json=body, headers=headers)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert other.post("/v1/chat/interactive", json=body).json()["text"] == "mine?"
    assert [m["content"] for m in http(server).get("/v1/sessions/private-1").json()["messages"]][-2:] == \
        ["secret", "secret"]


def test_bad_requests_get_openai_errors_and_the_server_stays_up(server, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], n=2)
    assert e.value.param == "n"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "robot", "content": "hi"}])
    assert e.value.param == "messages[0].role"
    c = http(server)
    bad = c.post("/v1/chat/completions", content=b'{"messages": [', headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    wrong = c.post("/v1/chat/completions", json={"messages": "hi"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "messages"
    huge = {"messages": [{"role": "user", "content": "x" * 300_000}]}
    assert c.post("/v1/chat/completions", json=huge).status_code == 413
    chunked = c.post("/v1/chat/completions", content=iter([b"x" * 65536] * 5))  # no Content-Length
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"
    missing = c.get("/v1/sessions/no-such-session")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found"
    assert c.get("/health").status_code == 200


def test_raw_completions_are_stateless(client, server):
    r = client.completions.create(model="m", prompt="<|im_start|>user\none two three four<|im_end|>", max_tokens=3)
    assert r.choices[0].text == "<|im_start|>user\none two " and r.choices[0].finish_reason == "length"
    streamed = client.completions.create(model="m", prompt="plain text prompt", max_tokens=50, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == "plain text prompt"
    with pytest.raises(openai.BadRequestError, match="needs a backend that knows the model's tokenizer"):
        client.completions.create(model="m", prompt=[1, 2, 3])  # token ids: the echo backend takes text
    listed = http(server).get("/v1/sessions").json()["data"]
    assert not [s for s in listed if s["id"].startswith(("oneoff", "!", "completion"))]


def test_sessions_api_create_get_fork_export_delete(server):
    c = http(server)
    created = c.post("/v1/sessions", json={"session_id": "api-1", "system": "Be brief."})
    assert created.status_code == 201 and created.json()["messages"] == [{"role": "system", "content": "Be brief."}]
    c.post("/v1/chat/interactive", json={"session_id": "api-1", "prompt": "Hi", "interactive_mode": True})
    got = c.get("/v1/sessions/api-1").json()
    assert got["turns"] == 1 and got["unit"] == "characters" and got["step"] > 0 and got["template"] == "qwen2.5"
    fork = c.post("/v1/sessions/api-1/fork", json={"session_id": "api-1-fork"})
    assert fork.status_code == 201 and fork.json()["messages"] == got["messages"]
    exported = c.get("/v1/sessions/api-1/export").json()
    assert Session.from_dict(exported).messages == got["messages"]
    assert c.delete("/v1/sessions/api-1").json()["deleted"] is True
    assert c.get("/v1/sessions/api-1").status_code == 404
    assert c.get("/v1/sessions/api-1-fork").json()["turns"] == 1
    assert c.post("/v1/sessions", json={"session_id": "api-1-fork"}).status_code == 409


def test_metrics_in_prometheus_text_format(server, client):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "count me"}])
    assert server.client().get("/metrics").status_code == 401  # the server has keys: /metrics needs one
    text = http(server).get("/metrics").text
    sample = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+$')
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or sample.match(line), line
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert float(values["lmchat_turns_total"]) >= 1 and float(values["lmchat_tokens_reused_total"]) >= 0
    assert float(values['lmchat_http_requests_total{method="POST",route="/v1/chat/completions",status="200"}']) >= 1
    assert 'lmchat_turn_latency_seconds_bucket{le="+Inf"}' in values
    assert 'lmchat_http_request_duration_seconds_count{route="/v1/chat/completions"}' in values
