"""Malformed Responses and Conversations requests: each gets an OpenAI-shaped 4xx with a code, and nothing
stored changes (the sessions list with its save times, a chain's session, a conversation's items)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")


TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]


@pytest.fixture(scope="module")
def state(memory_app):
    """A chain of two responses and a conversation with a queued item and an answered one."""
    client = memory_app.openai()
    first = client.responses.create(model="m", input="one", tools=TOOLS)
    second = client.responses.create(model="m", input="two", tools=TOOLS, previous_response_id=first.id)
    conv = client.conversations.create(items=[{"role": "user", "content": "hello"}])
    client.responses.create(model="m", input="hi", conversation=conv.id)
    client.conversations.items.create(conv.id, items=[{"role": "user", "content": "queued"}])
    return {"response": second.id, "conversation": conv.id, "sid": second.id.split("_")[1],
            "conv_sid": conv.id[5:]}


def stored(server, state) -> dict:
    with server.client(base="/v1") as api:
        return {
            "sessions": api.get("/sessions").json(),
            "chain": api.get(f"/sessions/{state['sid']}/export").json(),
            "conversation": api.get(f"/sessions/{state['conv_sid']}/export").json(),
            "response": api.get(f"/responses/{state['response']}").json(),
            "items": api.get(f"/conversations/{state['conversation']}/items").json(),
        }


def cases(state) -> list[tuple[str, str, object, int, str]]:
    """(method, path, JSON body or raw bytes, status, code)."""
    prev, conv = state["response"], state["conversation"]
    r = "/v1/responses"
    return [
        ("POST", r, b'{"input": "x"', 400, "invalid_json"),
        ("POST", r, {"input": 42}, 400, "invalid_value"),
        ("POST", r, {"input": [{"type": "message", "role": "robot", "content": "x"}], "previous_response_id": prev},
         400, "invalid_value"),
        ("POST", r, {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}],
                     "previous_response_id": prev}, 400, "unsupported_value"),
        ("POST", r, {"input": [{"type": "item_reference", "id": "msg_1"}], "previous_response_id": prev}, 400,
         "unsupported_value"),
        ("POST", r, {"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}],
                     "previous_response_id": prev, "tools": TOOLS}, 400, "invalid_messages"),
        ("POST", r, {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}],
                     "previous_response_id": prev}, 400, "invalid_value"),
        ("POST", r, {"input": [{"role": "user"}], "previous_response_id": prev}, 400, "invalid_value"),
        ("POST", r, {"input": [{"role": ["user"], "content": "x"}], "previous_response_id": prev}, 400,
         "invalid_value"),
        ("POST", r, {"input": "x", "tools": [{"type": "web_search"}], "previous_response_id": prev}, 400,
         "unsupported_value"),
        ("POST", r, {"input": "x", "tools": [{"type": "function"}], "previous_response_id": prev}, 400,
         "invalid_value"),
        ("POST", r, {"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"type": "array"}}],
                     "previous_response_id": prev}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "temperature": 5, "previous_response_id": prev}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "temperature": "hot", "previous_response_id": prev}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "max_output_tokens": 0, "previous_response_id": prev}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "previous_response_id": prev, "conversation": conv}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "previous_response_id": "resp_garbage"}, 404, "previous_response_not_found"),
        ("POST", r, {"input": "x", "previous_response_id": f"resp_{'a' * 32}_0"}, 404,
         "previous_response_not_found"),
        ("POST", r, {"input": "x", "conversation": "conv_nope"}, 404, "conversation_not_found"),
        ("POST", r, {"input": "x", "conversation": {"id": 7}}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "truncation": "sometimes", "previous_response_id": prev}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "reasoning": {"effort": "none"}, "previous_response_id": prev}, 400,
         "unsupported_value"),
        ("POST", r, {"input": "x", "reasoning": {"effort": "max"}, "previous_response_id": prev}, 400,
         "invalid_value"),
        # malformed (no name, no schema), then well formed but the echo backend cannot enforce it
        ("POST", r, {"input": "x", "text": {"format": {"type": "json_schema"}}, "conversation": conv}, 400,
         "invalid_value"),
        ("POST", r, {"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {}}},
                     "conversation": conv}, 400, "unsupported_value"),
        ("POST", r, {"input": "x", "background": True, "conversation": conv}, 400, "unsupported_value"),
        ("POST", r, {"input": "x", "metadata": {f"k{i}": "v" for i in range(17)}, "conversation": conv}, 400,
         "invalid_value"),
        ("POST", r, {"input": "x", "store": False, "conversation": conv}, 400, "unsupported_value"),
        ("POST", r, {"input": [], "previous_response_id": prev}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "tool_choice": "sometimes", "conversation": conv}, 400, "invalid_value"),
        ("POST", r, {"input": "x", "stream": "yes", "conversation": conv}, 400, "invalid_value"),
        ("POST", r, b'{"input": "\\ud800", "conversation": "' + conv.encode() + b'"}', 400, "invalid_value"),
        ("POST", r, b'{"input": ' + b"[" * 100 + b"]" * 100 + b"}", 400, "invalid_value"),
        ("GET", f"{r}/{prev}/input_items?order=sideways", None, 400, "invalid_value"),
        ("GET", f"{r}/resp_x", None, 404, "response_not_found"),
        ("DELETE", f"{r}/resp_{state['sid']}_9", None, 404, "response_not_found"),
        ("POST", "/v1/conversations", {"items": [{"role": "robot", "content": "x"}]}, 400, "invalid_value"),
        ("POST", "/v1/conversations", {"items": [{"role": {"user": 1}, "content": "x"}]}, 400, "invalid_value"),
        ("POST", "/v1/conversations", {"metadata": {"k": 1}}, 400, "invalid_value"),
        ("POST", f"/v1/conversations/{conv}", {}, 400, "invalid_value"),
        ("POST", f"/v1/conversations/{conv}/items", {"items": []}, 400, "invalid_value"),
        ("POST", f"/v1/conversations/{conv}/items", {"items": [{"type": "function_call_output", "call_id": "nope",
                                                                 "output": "x"}]}, 400, "invalid_messages"),
        ("GET", f"/v1/conversations/{conv}/items/msg_{state['conv_sid']}_99", None, 404, "item_not_found"),
        ("DELETE", f"/v1/conversations/{conv}/items/msg_{state['sid']}_0", None, 404, "item_not_found"),
        ("DELETE", f"/v1/conversations/{conv}/items/nonsense", None, 404, "item_not_found"),
        ("GET", f"/v1/conversations/conv_{state['sid']}", None, 404, "conversation_not_found"),
    ]


def test_every_malformed_request_gets_a_4xx_with_a_code_and_changes_nothing(memory_app, state):
    before = stored(memory_app, state)
    with memory_app.client() as http:
        for method, path, body, status, code in cases(state):
            content = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
            r = http.request(method, path, content=content, headers={"Content-Type": "application/json"})
            assert r.status_code == status, (method, path, body, r.text)
            error = r.json()["error"]
            assert error["code"] == code and error["message"] and error["type"], (path, body, error)
    assert stored(memory_app, state) == before
