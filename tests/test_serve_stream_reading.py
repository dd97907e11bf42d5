"""A streamed answer reads as the stored one (issue 40, item 8): the server's two streams (chat completions and
Responses events) parse the answer with what the turn decided when it started, as its commit does. On Gemma 4
with thinking on, the generation prompt after tool results opens the thought channel, so the answer begins
inside it ("it is sunny\\n<channel|>Sunny."): read without that, the stream sent it all as content.

An engine here replays fixed answers (no model); every turn runs on the event loop and in a pool worker."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")

from lmchat.backends.echo import EchoBackend  # noqa: E402
from lmchat.manager import SessionManager  # noqa: E402
from lmchat.session.edits import restored  # noqa: E402

Q = '<|"|>'
PARAMETERS = {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}]
CALLED = (f"<|channel>thought\nneed the tool\n<channel|><|tool_call>call:get_weather{{location:{Q}Paris{Q}}}"
          "<tool_call|><|tool_response>")
ANSWER = "it is sunny\n<channel|>Sunny.<turn|>"  # begun inside the thought channel the prompt opened
READ = {"reasoning": "it is sunny", "content": "Sunny."}


class Replaying(EchoBackend):
    """An engine that answers the given texts in turn (its stop words cut as a real engine cuts them)."""

    def __init__(self, answers: list[str]):
        super().__init__(prefix="")
        self.answers = list(answers)

    def reply(self, request):
        return self.answers.pop(0)


@pytest.fixture(params=[True, False], ids=["on-loop", "in-pool"])
def client(request):
    from starlette.testclient import TestClient

    from lmchat.serve.app import create_app

    mgr = SessionManager(Replaying([CALLED, ANSWER]), template="gemma4-e4b", on_loop=request.param)
    with TestClient(create_app(mgr)) as c:
        yield c


def chat_deltas(response) -> dict[str, str]:
    """A streamed chat answer's reasoning and content, joined."""
    joined = {"reasoning": "", "content": ""}
    for line in response.iter_lines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                delta = choice["delta"]
                joined["reasoning"] += delta.get("reasoning_content") or ""
                joined["content"] += delta.get("content") or ""
    return joined


def test_a_streamed_chat_answer_reads_as_the_stored_message_and_its_retry(client):
    mgr = client.app.state.manager
    mgr.create("s", tools=TOOLS)
    # thinking on (no chat request sets it; a session made so, or imported, has it)
    mgr.update("s", lambda v: (restored({**v.session.to_dict(), "template_kwargs": {"enable_thinking": True}},
                                        None, "thinking on"), None))
    history = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.post("/v1/chat/completions", json={"session_id": "s", "messages": history, "tools": TOOLS})
    assert first.status_code == 200, first.text
    message = first.json()["choices"][0]["message"]
    assert message["reasoning_content"] == "need the tool"
    history += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "sunny"}]
    body = {"session_id": "s", "messages": history, "tools": TOOLS, "stream": True}
    headers = {"Idempotency-Key": "k1"}
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status_code == 200
        streamed = chat_deltas(r)
    stored = mgr.get("s").messages[-1]
    assert streamed == {"reasoning": stored["reasoning_content"], "content": stored["content"]} == READ
    # a retry is answered the stored turn, read the same way, whole or streamed
    retried = client.post("/v1/chat/completions", json={**body, "stream": False}, headers=headers)
    answer = retried.json()["choices"][0]["message"]
    assert {"reasoning": answer["reasoning_content"], "content": answer["content"]} == READ
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        assert chat_deltas(r) == READ


def test_streamed_responses_events_read_as_the_stored_response(client):
    tools = [{"type": "function", "name": "get_weather", "parameters": PARAMETERS}]
    thinking = {"tools": tools, "reasoning": {"effort": "medium"}}  # each request says it
    first = client.post("/v1/responses", json={"input": "Weather in Paris?", **thinking})
    assert first.status_code == 200, first.text
    call = next(item for item in first.json()["output"] if item["type"] == "function_call")
    body = {**thinking, "previous_response_id": first.json()["id"], "stream": True,
            "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]}
    with client.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    streamed = {"reasoning": "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"),
                "content": "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")}
    completed = next(e for e in events if e["type"] == "response.completed")["response"]
    stored = client.get(f"/v1/responses/{completed['id']}").json()
    for response in (completed, stored):
        texts = {item["type"]: item["content"][0]["text"] for item in response["output"]}
        assert {"reasoning": texts["reasoning"], "content": texts["message"]} == streamed == READ
