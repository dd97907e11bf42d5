"""Issue 26, item 4: tools sent to a template without tool syntax are refused with a 400, not ignored.

Through `lmchat serve` (echo backend) and the real `openai` client: the bundled smollm2 template neither
renders nor parses tools, so every route that hands a request's tools to a session (chat completions,
Responses, Conversations, `POST /v1/sessions`) answers 400 with ``param`` the client's field, before anything is
stored; a qwen2.5 server still takes them.
"""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from .serve_helpers import InProcess  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
FLAT = [{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def smollm2():
    s = InProcess("--template", "smollm2", "--backend-option", "prefix=")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def qwen():
    s = InProcess("--template", "qwen2.5", "--backend-option", "prefix=")
    yield s
    s.stop()


def client(server) -> openai.OpenAI:
    return server.openai("unused")


def refused(exc: pytest.ExceptionInfo) -> None:
    assert exc.value.status_code == 400
    error = exc.value.response.json()["error"]
    assert error["param"] == "tools" and error["code"] == "tools_unsupported"
    assert "smollm2" in error["message"] and "docs/tools.md" in error["message"], error["message"]


def test_chat_completions_refuse_tools(smollm2):
    c = client(smollm2)
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model="m", messages=HI, tools=TOOLS)
    refused(exc)
    with pytest.raises(openai.BadRequestError) as exc:  # a stored session: not created
        c.chat.completions.create(model="m", messages=HI, tools=TOOLS, extra_headers={"X-Session-Id": "t1"})
    refused(exc)
    with pytest.raises(openai.NotFoundError):
        c.get("/sessions/t1", cast_to=object)
    c.chat.completions.create(model="m", messages=HI, extra_headers={"X-Session-Id": "t2"})  # without tools: fine
    with pytest.raises(openai.BadRequestError) as exc:  # an existing session, tools resent with its history
        c.chat.completions.create(model="m", messages=HI, tools=TOOLS, extra_headers={"X-Session-Id": "t2"})
    refused(exc)
    assert c.chat.completions.create(model="m", messages=HI).choices[0].message.content


def test_responses_refuse_tools(smollm2):
    c = client(smollm2)
    for store in (True, False):
        with pytest.raises(openai.BadRequestError) as exc:
            c.responses.create(model="m", input="hi", tools=FLAT, store=store)
        refused(exc)
    first = c.responses.create(model="m", input="hi")
    with pytest.raises(openai.BadRequestError) as exc:  # a chain continued with tools
        c.responses.create(model="m", input="again", tools=FLAT, previous_response_id=first.id)
    refused(exc)
    with smollm2.client() as h:
        conversation = h.post("/v1/conversations", json={}).json()["id"]
        r = h.post("/v1/responses", json={"model": "m", "input": "hi", "tools": FLAT, "conversation": conversation})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tools", r.text


def test_sessions_refuse_tools(smollm2):
    with smollm2.client() as h:
        r = h.post("/v1/sessions", json={"session_id": "s-tools", "tools": TOOLS})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "tools" and "smollm2" in error["message"]
        assert h.get("/v1/sessions/s-tools").status_code == 404
        assert h.post("/v1/sessions", json={"session_id": "s-plain"}).status_code == 201


def test_a_template_with_tool_syntax_takes_them(qwen):
    c = client(qwen)
    assert c.chat.completions.create(model="m", messages=HI, tools=TOOLS).choices
    assert c.responses.create(model="m", input="hi", tools=FLAT).id
    with qwen.client() as h:
        r = h.post("/v1/sessions", json={"session_id": "q-tools", "tools": TOOLS})
        assert r.status_code == 201 and r.json()["tools"] == TOOLS, r.text


def test_templates_that_render_tools_without_the_flag_are_not_refused():
    """InternLM2 and ChatGLM3 render tools with supports_tools False: tools are not ignored there."""
    from lmchat.registry import template_class
    from lmchat.validation import handles_tools

    assert handles_tools(template_class("internlm2")()) and handles_tools(template_class("chatglm3")())
    assert not handles_tools(template_class("smollm2")())
