"""Sessions with InternLM2's and ChatGLM3's tool prompts: deltas stay exact and never reset."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmchat import Session, get_template

from .conversations import PLAIN_WORDS, TEXT, TOOLS, a, s, u
from .hypothesis_profiles import examples
from .test_tool_prompts import DATE, GLM_MESSAGES, WEATHER_TOOLS, raw_actions
from .tool_prompt_seeds import call


def test_internlm2_session_keeps_a_raw_tool_call_answer():
    session = Session("internlm2", tools=WEATHER_TOOLS, date=DATE)
    session.prompt("我想了解今天上海的天气")
    session.commit("好的。" + raw_actions([call("get_current_weather", {"location": "上海"}, "c0")]))
    delta = session.extend([{"role": "tool", "name": "get_current_weather", "content": '{"temperature": 22}'}])
    assert not delta.reset
    assert delta.text == ('\n<|im_start|>environment name=<|plugin|>\n{"temperature": 22}<|im_end|>\n'
                          "<|im_start|>assistant\n")


def test_chatglm3_session_tool_turn_delta_starts_with_the_call():
    session = Session("chatglm3", tools=WEATHER_TOOLS, date=DATE)
    session.prompt("今天北京的天气怎么样?")
    delta = session.extend(GLM_MESSAGES[1:3])
    assert not delta.reset
    assert delta.text == (
        "\n 好的,让我们来查看今天的天气<|assistant|>get_current_weather\n ```python\n"
        "tool_call(location='beijing', unit='celsius')\n```<|observation|>\n {\"temperature\": 22}<|assistant|>"
    )


COMMITS = [  # (template, what the model wrote before its stop word, the stop word the engine keeps, parsed content)
    ("internlm2", '好的。<|action_start|><|plugin|>\n{"name": "add", "parameters": {"a": 1}}', "<|action_end|>",
     "好的。"),
    ("internlm2", "<|action_start|><|interpreter|>\n```python\nprint(1)\n```", "<|action_end|>", ""),
    ("chatglm3", "add\n ```python\ntool_call(a=1)\n```", "", ""),
    ("chatglm3", "\n 好的<|assistant|>add\n ```python\ntool_call(a=1)\n```", "", "好的"),
]


@pytest.mark.parametrize("name, raw, stop, content", COMMITS)
def test_a_raw_call_committed_with_its_parsed_form_needs_no_reset(name, raw, stop, content):
    calls = [call("python", {"code": "print(1)"}, "c0") if "print" in raw else call("add", {"a": 1}, "c0")]
    session = Session(name, tools=TOOLS, date=DATE)
    session.prompt("q")
    session.commit(raw, stop=stop, content=content, tool_calls=calls)
    delta = session.extend([{"role": "tool", "tool_call_id": "c0", "content": "1"}])
    assert not delta.reset, delta.reason
    assert session.context.endswith(raw + stop + delta.text)


NAMES = ["get_current_weather", "add", "python"]
MODES = ["parsed commit", "client sends calls", "raw commit"]


def glm_raw(preamble, calls) -> str:
    """What ChatGLM3 writes after ``<|assistant|>`` for calls, from the documented format."""
    out = f"\n {preamble}" if preamble else ""
    for c in calls:
        fn, args = c["function"], json.loads(c["function"]["arguments"])
        if fn["name"] == "python":
            out += f"<|assistant|>interpreter\n ```python\n{args['code']}\n```"
        else:
            out += (f"<|assistant|>{fn['name']}\n ```python\n"
                    f"tool_call({', '.join(f'{k}={v!r}' for k, v in args.items())})\n```")
    return out if preamble else out.removeprefix("<|assistant|>")


@st.composite
def tool_turns(draw, text):
    """One user turn: question, preamble, calls (maybe none), their results, answer, client mode, round trip."""
    calls = []
    for k in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(NAMES))
        values = st.one_of(text, st.integers(-5, 5), st.booleans(), st.none())
        args = {"code": draw(text)} if name == "python" else draw(
            st.dictionaries(st.sampled_from(["location", "unit", "a", "b"]), values, max_size=3))
        calls.append(call(name, args, f"c{k}"))
    results = [draw(text) for _ in calls]
    return draw(text), draw(text), calls, results, draw(text), draw(st.sampled_from(MODES)), draw(st.booleans())


@st.composite
def tool_dialogues(draw, text):
    return draw(st.one_of(st.none(), text)), draw(st.lists(tool_turns(text), min_size=1, max_size=4))


def events(name, lead, turn):
    """What a client does for one turn: ('prompt'|'extend', messages) or ('commit', raw, stored message, stop).

    A raw call answer is committed whole (``stop=""``: the action markers are in it); a plain one with
    the template's end-of-turn marker."""
    question, preamble, calls, results, answer, mode, _ = turn
    out = [("prompt", [u(question)])]
    answers = [{"role": "tool", "tool_call_id": c["id"], "content": r} for c, r in zip(calls, results, strict=True)]
    if calls and mode == "parsed commit":  # the engine keeps the raw text, the parser gives the message
        raw = preamble + raw_actions(calls) if name == "internlm2" else glm_raw(preamble, calls)
        out += [("commit", raw, a(preamble, tool_calls=calls), ""), ("extend", answers)]
    elif calls and mode == "raw commit" and name == "internlm2":  # raw text only: results name their tool
        out.append(("commit", preamble + raw_actions(calls), a(preamble + raw_actions(calls)), ""))
        out.append(("extend", [{"role": "tool", "name": c["function"]["name"], "content": r}
                               for c, r in zip(calls, results, strict=True)]))
    elif calls:  # the client sends the parsed calls with their results
        out.append(("extend", [a(preamble, tool_calls=calls), *answers]))
    return out + [("commit", lead + answer, a(answer), None)]


def play(name, system, turns):
    """Replay a tool dialogue: every delta extends the context to the full rendering, never a reset."""
    template = get_template(name)
    kwargs = {"interpreter": True} if name == "internlm2" else {}
    session = Session(template, system=system, tools=TOOLS, date=DATE, template_kwargs=kwargs)
    messages = [] if system is None else [s(system)]
    for turn in turns:
        for kind, *args in events(name, template.lead, turn):
            before = session.context
            if kind == "commit":  # the stored message is the parsed one, whatever the raw text
                session.commit(args[0], stop=args[2], **{k: v for k, v in args[1].items() if k != "role"})
                messages.append(args[1])
                continue
            messages.extend(args[0])
            delta = session.prompt(args[0][0]["content"]) if kind == "prompt" else session.extend(args[0])
            assert not delta.reset, delta.reason
            assert before + delta.text == template.messages2prompt(messages, tools=TOOLS, date=DATE, **kwargs)
            assert session.context == before + delta.text
        if turn[-1]:
            session = Session.from_dict(json.loads(json.dumps(session.to_dict())))


@pytest.mark.parametrize("name", ["internlm2", "chatglm3"])
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dialogue=tool_dialogues(TEXT))
def test_tool_sessions_never_reset(name, dialogue):
    play(name, *dialogue)


@pytest.mark.parametrize("name", ["internlm2", "chatglm3"])
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dialogue=tool_dialogues(PLAIN_WORDS))
def test_tool_sessions_with_plain_words(name, dialogue):
    play(name, *dialogue)
