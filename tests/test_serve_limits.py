"""One limit per field, whichever route carries it (issue 26, item 12): a text over the message limit, too many
messages or items, a ``tool_choice`` naming no tool of the request, a reasoning effort the template cannot
honour, a non-boolean ``include_usage``, an empty session id, a token budget of 0, a prompt that does not fit.
Each is a 400 in OpenAI's error shape naming the client's own field, and nothing stored changes."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")

from lmchat.registry import get_template  # noqa: E402
from lmchat.serve.errors import ApiError  # noqa: E402
from lmchat.serve.responses_model import check_effort  # noqa: E402
from lmchat.validation import DEFAULT_MAX_CHARS, MAX_MESSAGES  # noqa: E402

from .serve_helpers import InProcess  # noqa: E402

SID = "target"
GOOD = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"}]
BIG = "x" * (DEFAULT_MAX_CHARS + 1)
TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
SESSION_LEN = 300  # the overflow server's, in characters (the echo backend has no tokenizer)


@pytest.fixture(scope="module")
def state(memory_app):
    """A chat session, a chain of two responses and a conversation."""
    with memory_app.client(timeout=60) as http:
        for n in (1, 3):
            r = http.post("/v1/chat/completions", json={"messages": GOOD[:n], "session_id": SID})
            assert r.status_code == 200, r.text
        first = http.post("/v1/responses", json={"input": "one", "tools": TOOLS}).json()
        second = http.post("/v1/responses", json={"input": "two", "tools": TOOLS,
                                                  "previous_response_id": first["id"]}).json()
        conv = http.post("/v1/conversations", json={"items": [{"role": "user", "content": "hello"}]}).json()
        assert http.post("/v1/responses", json={"input": "hi", "conversation": conv["id"]}).status_code == 200
    return {"response": second["id"], "sid": second["id"].split("_")[1], "conversation": conv["id"]}


def stored(server, state) -> dict:
    with server.client(base="/v1", timeout=60) as api:
        return {"sessions": api.get("/sessions").json(), "chat": api.get(f"/sessions/{SID}/export").json(),
                "chain": api.get(f"/sessions/{state['sid']}/export").json(),
                "response": api.get(f"/responses/{state['response']}").json(),
                "items": api.get(f"/conversations/{state['conversation']}/items").json()}


def chat(**fields):
    return "/v1/chat/completions", {"messages": GOOD, "session_id": SID, **fields}


def responses(state, **fields):
    return "/v1/responses", {"input": "x", "previous_response_id": state["response"], **fields}


def interactive(**fields):
    return "/v1/chat/interactive", {"prompt": "hi", "session_id": SID, "interactive_mode": True, **fields}


def completions(**fields):
    return "/v1/completions", {"prompt": "hi", **fields}


def cases(state) -> dict[str, tuple[str, dict, str, str]]:
    """label -> (path, body, param, code): each a 400."""
    r = lambda **f: responses(state, **f)  # noqa: E731
    call_output = {"type": "function_call_output", "call_id": "nope", "output": "x"}
    return {
        # a text over the limit a message's content has: the same limit and code whichever field carries it
        "chat content": (*chat(messages=[*GOOD[:2], {"role": "user", "content": BIG}]), "messages[2].content",
                         "string_above_max_length"),
        "responses instructions": (*r(instructions=BIG), "instructions", "string_above_max_length"),
        "sessions system": ("/v1/sessions", {"session_id": "fresh", "system": BIG}, "system",
                            "string_above_max_length"),
        "responses input text": (*r(input=BIG), "input", "string_above_max_length"),
        "responses input item": (*r(input=[{"role": "user", "content": BIG}]), "input[0].content",
                                 "string_above_max_length"),
        "interactive prompt": (*interactive(prompt=BIG), "prompt", "string_above_max_length"),
        # as many Responses input items as chat takes messages
        "chat messages count": (*chat(messages=[GOOD[0]] * (MAX_MESSAGES + 1)), "messages", "invalid_value"),
        "responses input count": (*r(input=[{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)), "input",
                                  "invalid_value"),
        # an error in a turn's message names the client's field, not the session's messages[k]
        "responses call_id": (*r(input=[call_output], tools=TOOLS), "input[0].call_id", "invalid_messages"),
        "responses call_id after items": (*r(input=[{"role": "user", "content": "a"}, {"type": "reasoning",
                                                                                        "content": []},
                                                    {"role": "assistant", "content": "b"}, call_output],
                                             tools=TOOLS), "input[3].call_id", "invalid_messages"),
        "interactive prompt item": (*interactive(prompt=[{"role": "user", "content": ""},
                                                         {"role": "robot", "content": "x"}]), "prompt[1].role",
                                    "invalid_messages"),
        # a session made for a first turn that is refused goes again (session_id -1 keeps nothing)
        "interactive new session": (*interactive(session_id=-1, prompt=[{"role": "robot", "content": "x"}]),
                                    "prompt[0].role", "invalid_messages"),
        # tool_choice names a tool of the request's own
        "chat tool_choice word": (*chat(tool_choice="sometimes"), "tool_choice", "invalid_value"),
        "chat tool_choice required without tools": (*chat(tool_choice="required"), "tool_choice", "invalid_value"),
        "chat tool_choice no name": (*chat(tools=CHAT_TOOLS, tool_choice={"type": "function"}),
                                     "tool_choice.function.name", "invalid_value"),
        "chat tool_choice unknown": (*chat(tools=CHAT_TOOLS, tool_choice={"type": "function",
                                                                          "function": {"name": "g"}}),
                                     "tool_choice.function.name", "invalid_value"),
        "responses tool_choice word": (*r(tool_choice="sometimes"), "tool_choice", "invalid_value"),
        "responses tool_choice required without tools": (*r(tool_choice="required"), "tool_choice",
                                                         "invalid_value"),
        "responses tool_choice no name": (*r(tools=TOOLS, tool_choice={"type": "function"}), "tool_choice.name",
                                          "invalid_value"),
        "responses tool_choice unknown": (*r(tools=TOOLS, tool_choice={"type": "function", "name": "g"}),
                                          "tool_choice.name", "invalid_value"),
        "responses allowed_tools unknown": (*r(tools=TOOLS, tool_choice={"type": "allowed_tools", "mode": "auto",
                                                                         "tools": [{"type": "function",
                                                                                    "name": "g"}]}),
                                            "tool_choice.tools[0].name", "invalid_value"),
        # a reasoning effort the template cannot honour, either way (qwen2.5 does not reason)
        "responses effort high": (*r(reasoning={"effort": "high"}), "reasoning.effort", "unsupported_value"),
        "responses effort none": (*r(reasoning={"effort": "none"}), "reasoning.effort", "unsupported_value"),
        # booleans are booleans
        "chat include_usage": (*chat(stream=True, stream_options={"include_usage": "maybe"}),
                               "stream_options.include_usage", "invalid_value"),
        "completions include_usage": (*completions(stream=True, stream_options={"include_usage": "maybe"}),
                                      "stream_options.include_usage", "invalid_value"),
        # an empty session id is no id (it meant a one-off on chat)
        "chat session_id": (*chat(session_id=""), "session_id", "invalid_value"),
        "sessions session_id": ("/v1/sessions", {"session_id": ""}, "session_id", "invalid_value"),
        "fork session_id": (f"/v1/sessions/{SID}/fork", {"session_id": ""}, "session_id", "invalid_value"),
        "interactive session_id": (*interactive(session_id=""), "session_id", "invalid_value"),
        # a token budget of 0 is refused on every route, as OpenAI refuses max_tokens 0
        "chat max_tokens 0": (*chat(max_tokens=0), "max_tokens", "invalid_value"),
        "chat max_completion_tokens 0": (*chat(max_completion_tokens=0), "max_completion_tokens", "invalid_value"),
        "completions max_tokens 0": (*completions(max_tokens=0), "max_tokens", "invalid_value"),
        "responses max_output_tokens 0": (*r(max_output_tokens=0), "max_output_tokens", "invalid_value"),
        "interactive request_output_len 0": (*interactive(request_output_len=0), "request_output_len",
                                             "invalid_value"),
    }


LABELS = sorted(cases({"response": "", "sid": "", "conversation": ""}))


@pytest.mark.parametrize("label", LABELS)
def test_a_bad_field_is_refused_alike_on_every_route_naming_it_and_nothing_changes(memory_app, state, label):
    path, body, param, code = cases(state)[label]
    before = stored(memory_app, state)
    with memory_app.client(timeout=60) as http:
        r = http.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code == 400, (label, r.status_code, r.text[:300])
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, (label, error)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code), (label, error)
    assert error["message"].startswith(param) or f"'{param}'" in error["message"], (label, error)
    assert stored(memory_app, state) == before, label


def test_what_the_checks_let_through(memory_app, state):
    """A choice naming a request's tool, a one-off's usage chunk; the limits are inclusive."""
    with memory_app.client(timeout=60) as http:
        named = {"type": "function", "function": {"name": "f"}}
        # a valid choice passes the checks; the echo backend then cannot force the call it names (a grammar)
        forced = http.post("/v1/chat/completions", json={"messages": GOOD[:1], "tools": CHAT_TOOLS,
                                                         "tool_choice": named, "max_tokens": 1})
        assert forced.status_code == 400 and forced.json()["error"]["code"] == "unsupported_value", forced.text
        ok = http.post("/v1/chat/completions", json={"messages": GOOD[:1], "tools": CHAT_TOOLS, "tool_choice": "auto",
                                                     "max_tokens": 1})
        assert ok.status_code == 200, ok.text
        ok = http.post("/v1/responses", json={"input": "x", "tools": TOOLS, "store": False, "tool_choice": "auto",
                                              "instructions": "x" * DEFAULT_MAX_CHARS})
        assert ok.status_code == 200, ok.text
        ok = http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1, "stream": True,
                                                "stream_options": {"include_usage": True}})
        assert ok.status_code == 200 and '"usage"' in ok.text.split("data: [DONE]")[0].rsplit("data: ", 1)[-1]


@pytest.fixture(scope="module")
def small():
    s = InProcess("--template", "qwen2.5", "--store", "memory", "--backend-option", "prefix=",
               "--session-len", str(SESSION_LEN))
    yield s
    s.stop()


LONG = "y" * (2 * SESSION_LEN)
OVERFLOWS = {
    "completions": ("/v1/completions", {"prompt": LONG}, "prompt"),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}]}, "messages"),
    "chat session": ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}], "session_id": "s"},
                     "messages"),
    "responses": ("/v1/responses", {"input": LONG}, "input"),
    "interactive": ("/v1/chat/interactive", {"prompt": LONG, "interactive_mode": False}, "prompt"),
    "interactive new session": ("/v1/chat/interactive", {"prompt": LONG, "interactive_mode": True}, "prompt"),
}


@pytest.mark.parametrize("label", sorted(OVERFLOWS))
def test_a_prompt_that_does_not_fit_is_context_length_exceeded_on_every_route(small, label):
    path, body, param = OVERFLOWS[label]
    with small.client(timeout=60) as http:
        before = http.get("/v1/sessions").json()
        r = http.post(path, json=body)
        assert r.status_code == 400, (label, r.status_code, r.text[:300])
        error = r.json()["error"]
        assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param,
                                                                  "context_length_exceeded"), (label, error)
        assert http.get("/v1/sessions").json() == before, label
        assert http.post(path, json={**body, **_short(body)}).status_code == 200, label  # what fits still runs


def _short(body: dict) -> dict:
    if "messages" in body:
        return {"messages": [{"role": "user", "content": "hi"}]}
    return {"input": "hi"} if "input" in body else {"prompt": "hi"}


@pytest.mark.parametrize("template, effort, refused", [
    ("qwen2.5", "high", True), ("qwen2.5", "none", True), ("qwen3", "high", False), ("qwen3", "none", False),
    ("deepseek-r1", "high", False), ("deepseek-r1", "none", True), ("qwq", "low", False),
])
def test_a_reasoning_effort_needs_a_template_that_can_honour_it(template, effort, refused):
    """Not "none" without a switch to turn reasoning off; no other effort on a model that does not reason."""
    if refused:
        with pytest.raises(ApiError) as err:
            check_effort(get_template(template), effort != "none")
        assert err.value.param == "reasoning.effort" and err.value.code == "unsupported_value"
    else:
        check_effort(get_template(template), effort != "none")
