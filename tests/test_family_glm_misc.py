"""GLM, Granite, Falcon3, OpenChat and SOLAR: features the shared batteries do not reach."""
from __future__ import annotations

import datetime as dt

import pytest

from lmchat import get_template
from lmchat.registry import canonical_name

from . import oracle
from .conversations import TOOLS, a, call, s, tool, u
from .test_conformance import assert_same

pytestmark = oracle.needs_corpus

GLM4_TOOLS = [
    {"type": "function", "function": TOOLS[0]["function"]},
    {"type": "python"},
    {"type": "simple_browser"},
    {"type": "cogview"},
    {"type": "unknown"},
    "not a tool",
]


@pytest.mark.parametrize(
    "alias, name",
    [
        ("chatglm3-6b", "chatglm3"),
        ("glm-4", "glm4"),
        ("glm4-chat", "glm4"),
        ("chatglm4", "glm4"),
        ("granite-3.1", "granite3"),
        ("granite", "granite3"),
        ("openchat-3.5", "openchat"),
        ("solar-instruct", "solar"),
    ],
)
def test_aliases(alias, name):
    assert canonical_name(alias) == name


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_glm4_message_tools_metadata_and_observation(generation_prompt):
    messages = [
        {"role": "system", "content": "", "tools": GLM4_TOOLS},
        u("Weather in 上海?"),
        a('{"location": "上海"}', metadata="get_current_weather"),
        {"role": "observation", "content": '{"temperature": 22}'},
        a("22 degrees."),
        {"role": "user", "content": "and now?", "tools": [TOOLS[1]]},
    ]
    text = assert_same("glm4", messages, add_generation_prompt=generation_prompt)
    assert "<|assistant|>get_current_weather\n" in text and "## cogview" in text


def test_glm4_rejects_what_its_template_cannot_render():
    for bad in ({"role": "system", "content": "", "tools": 3}, {"role": "system", "tools": [{"type": "function"}]}):
        assert assert_same("glm4", [bad, u("hi")]).startswith("rejected")


@pytest.mark.parametrize("name", ["chatglm3", "glm4"])
def test_glm_missing_content_prints_nothing(name):
    assert_same(name, [u("hi"), {"role": "assistant"}, u("ok")])
    if name == "glm4":  # ChatGLM3 renders tool_calls (docs/tool-prompts.md); GLM-4 ignores them like its template
        assert_same(name, [u("hi"), {"role": "assistant", "tool_calls": [call("add", {"a": 1, "b": 2})]}, u("ok")])


@pytest.mark.parametrize("name, answer", [("chatglm3", "Hi there"), ("glm4", "Hi there"), ("openchat", "Hi there")])
def test_lead_lines_the_answer_up_with_its_canonical_turn(name, answer):
    """What the engine holds after an answer (prompt + lead + answer + eoa) prefixes the next rendering."""
    template = get_template(name)
    held = template.messages2prompt([u("Hello")]) + template.lead + answer + template.eoa
    assert template.messages2prompt([u("Hello"), a(answer), u("More")]).startswith(held)


DOCUMENTS = [{"text": "Paris is in France."}, {"title": "no text"}, {"text": 42}]


@pytest.mark.parametrize("tools", [TOOLS, None])
@pytest.mark.parametrize("documents", [DOCUMENTS, None])
@pytest.mark.parametrize("controls", [{"citations": True, "hallucinations": True, "length": "short"}, None])
def test_granite_documents_controls_tools(tools, documents, controls):
    extra = {k: v for k, v in (("documents", documents), ("controls", controls)) if v is not None}
    for messages in ([u("Where is Paris?")], [s("Custom."), u("Where is Paris?")], [s("only system")]):
        assert_same("granite3", messages, tools=tools, **extra)


def test_granite_uses_the_session_date():
    date = dt.date(2025, 1, 2)
    text = get_template("granite3").messages2prompt([u("hi")], date=date)
    assert "Today's Date: January 02, 2025.\n" in text
    assert text == oracle.render(get_template("granite3"), [u("hi")], date=date)


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_falcon3_tools_mode_drops_later_systems_and_wraps_results(generation_prompt):
    messages = [
        s("Be brief. "),
        u("Add 1+2"),
        s("dropped in tools mode"),
        a("", tool_calls=[call("add", {"a": 1, "b": 2})]),
        tool("3", name="add"),
        {"role": "ipython", "content": "ignored"},
        a("It is 3."),
    ]
    for tools in (TOOLS, None):
        assert_same("falcon3", messages, tools=tools, add_generation_prompt=generation_prompt)
        assert_same("falcon3", messages[1:], tools=tools, add_generation_prompt=generation_prompt)


@pytest.mark.parametrize(
    "name, messages",
    [
        ("falcon3", [u(["not", "a", "string"])]),
        ("falcon3", [{"role": "user"}]),
        ("granite3", [{"role": "system"}, u("hi")]),
        ("openchat", [{"role": "user"}]),
        ("solar", [s(["parts"]), u("hi")]),
    ],
)
def test_rejections_match_the_official_template(name, messages):
    assert assert_same(name, messages).startswith("rejected")


def test_openchat_titles_any_role_and_solar_skips_unknown_roles():
    assert_same("openchat", [s("sys"), u("hi"), {"role": "tool", "content": "x"}])
    text = assert_same("solar", [s(""), u("hi"), {"role": "tool", "content": "x"}, a("yo"), u("again")])
    assert text == "### User:\nhi\n\n### Assistant:\nyo### User:\nagain\n\n### Assistant:\n"
