"""GLM, Granite, Falcon3, OpenChat and SOLAR: features the shared batteries do not reach."""
from __future__ import annotations

import datetime as dt

import pytest

from lmchat import get_template
from lmchat.registry import canonical_name

from .conversations import TOOLS, a, call, s, tool, u
from .test_conformance import assert_same

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


GLM4_CONVERSATION = [
    {"role": "system", "content": "", "tools": GLM4_TOOLS},
    u("Weather in 上海?"),
    a('{"location": "上海"}', metadata="get_current_weather"),
    {"role": "observation", "content": '{"temperature": 22}'},
    a("22 degrees."),
    {"role": "user", "content": "and now?", "tools": [TOOLS[1]]},
]
GLM4_BAD_SYSTEMS = [{"role": "system", "content": "", "tools": 3}, {"role": "system", "tools": [{"type": "function"}]}]
MISSING_CONTENT = [u("hi"), {"role": "assistant"}, u("ok")]
CALLS_WITHOUT_CONTENT = [u("hi"), {"role": "assistant", "tool_calls": [call("add", {"a": 1, "b": 2})]}, u("ok")]


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_glm4_message_tools_metadata_and_observation(generation_prompt):
    text = assert_same("glm4", GLM4_CONVERSATION, add_generation_prompt=generation_prompt)
    assert "<|assistant|>get_current_weather\n" in text and "## cogview" in text


def test_glm4_rejects_what_its_template_cannot_render():
    for bad in GLM4_BAD_SYSTEMS:
        assert assert_same("glm4", [bad, u("hi")]).startswith("rejected")


@pytest.mark.parametrize("name", ["chatglm3", "glm4"])
def test_glm_missing_content_prints_nothing(name):
    assert_same(name, MISSING_CONTENT)
    if name == "glm4":  # ChatGLM3 renders tool_calls (docs/tool-prompts.md); GLM-4 ignores them like its template
        assert_same(name, CALLS_WITHOUT_CONTENT)


@pytest.mark.parametrize("name, answer", [("chatglm3", "Hi there"), ("glm4", "Hi there"), ("openchat", "Hi there")])
def test_lead_lines_the_answer_up_with_its_canonical_turn(name, answer):
    """What the engine holds after an answer (prompt + lead + answer + eoa) prefixes the next rendering."""
    template = get_template(name)
    held = template.messages2prompt([u("Hello")]) + template.lead + answer + template.eoa
    assert template.messages2prompt([u("Hello"), a(answer), u("More")]).startswith(held)


DOCUMENTS = [{"text": "Paris is in France."}, {"title": "no text"}, {"text": 42}]
CONTROLS = {"citations": True, "hallucinations": True, "length": "short"}
GRANITE_CONVERSATIONS = [[u("Where is Paris?")], [s("Custom."), u("Where is Paris?")], [s("only system")]]
GRANITE_DATE = dt.date(2025, 1, 2)
FALCON3_TOOLS_MODE = [
    s("Be brief. "),
    u("Add 1+2"),
    s("dropped in tools mode"),
    a("", tool_calls=[call("add", {"a": 1, "b": 2})]),
    tool("3", name="add"),
    {"role": "ipython", "content": "ignored"},
    a("It is 3."),
]
REJECTED = [
    ("falcon3", [u(["not", "a", "string"])]),
    ("falcon3", [{"role": "user"}]),
    ("granite3", [{"role": "system"}, u("hi")]),
    ("openchat", [{"role": "user"}]),
    ("solar", [s(["parts"]), u("hi")]),
]
OPENCHAT_TOOL_ROLE = [s("sys"), u("hi"), {"role": "tool", "content": "x"}]
SOLAR_TOOL_ROLE = [s(""), u("hi"), {"role": "tool", "content": "x"}, a("yo"), u("again")]


def granite_options(tools, documents, controls):
    return {"tools": tools, **{k: v for k, v in (("documents", documents), ("controls", controls)) if v is not None}}


@pytest.mark.parametrize("tools", [TOOLS, None])
@pytest.mark.parametrize("documents", [DOCUMENTS, None])
@pytest.mark.parametrize("controls", [CONTROLS, None])
def test_granite_documents_controls_tools(tools, documents, controls):
    for messages in GRANITE_CONVERSATIONS:
        assert_same("granite3", messages, **granite_options(tools, documents, controls))


def test_granite_uses_the_session_date():
    text = get_template("granite3").messages2prompt([u("hi")], date=GRANITE_DATE)
    assert "Today's Date: January 02, 2025.\n" in text
    assert text == assert_same("granite3", [u("hi")], date=GRANITE_DATE)


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_falcon3_tools_mode_drops_later_systems_and_wraps_results(generation_prompt):
    for tools in (TOOLS, None):
        assert_same("falcon3", FALCON3_TOOLS_MODE, tools=tools, add_generation_prompt=generation_prompt)
        assert_same("falcon3", FALCON3_TOOLS_MODE[1:], tools=tools, add_generation_prompt=generation_prompt)


@pytest.mark.parametrize("name, messages", REJECTED)
def test_rejections_match_the_official_template(name, messages):
    assert assert_same(name, messages).startswith("rejected")


def test_openchat_titles_any_role_and_solar_skips_unknown_roles():
    assert_same("openchat", OPENCHAT_TOOL_ROLE)
    text = assert_same("solar", SOLAR_TOOL_ROLE)
    assert text == "### User:\nhi\n\n### Assistant:\nyo### User:\nagain\n\n### Assistant:\n"


#: the official renderings these tests compare with (tests/golden)
GOLDEN = (
    [("glm4", GLM4_CONVERSATION, {"add_generation_prompt": g}) for g in (True, False)]
    + [("glm4", [bad, u("hi")], {}) for bad in GLM4_BAD_SYSTEMS]
    + [(n, MISSING_CONTENT, {}) for n in ("chatglm3", "glm4")] + [("glm4", CALLS_WITHOUT_CONTENT, {})]
    + [("granite3", m, granite_options(t, d, c))
       for t in (TOOLS, None) for d in (DOCUMENTS, None) for c in (CONTROLS, None) for m in GRANITE_CONVERSATIONS]
    + [("granite3", [u("hi")], {"date": GRANITE_DATE})]
    + [("falcon3", m, {"tools": t, "add_generation_prompt": g})
       for g in (True, False) for t in (TOOLS, None) for m in (FALCON3_TOOLS_MODE, FALCON3_TOOLS_MODE[1:])]
    + [(n, m, {}) for n, m in REJECTED]
    + [("openchat", OPENCHAT_TOOL_ROLE, {}), ("solar", SOLAR_TOOL_ROLE, {})]
)
