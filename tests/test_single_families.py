"""Single texts as built-ins: Yi-1.5, Yi-Coder, QwQ-32B-Preview, CodeLlama-70b-Instruct, DeepSeek-V2.5 and
OpenChat 3.6, each against its official template, in sessions, and by its model names.

DeepSeek-V2.5 writes V3's calls; the parser cases are llama.cpp's ``tests/test-chat.cpp`` DeepSeek R1/V3 cases
(one call, content then a call) and vLLM's DeepSeek-V3 parser outputs (two calls joined by a newline), as far as
they are known here, from memory of their assertions: not copied, and not checked against the published files.
Each runs whole, cut at every split point and in odd chunk sizes.
"""
from __future__ import annotations

import pytest

from lmchat import Session, get_template, match_template, parse_response
from lmchat.tools import response_format

from .parser_chunks import calls, fed_in_sizes
from .test_conformance import assert_same


def u(content, **extra):
    return {"role": "user", "content": content, **extra}


def a(content, **extra):
    return {"role": "assistant", "content": content, **extra}


def s(content):
    return {"role": "system", "content": content}


def tool(content):
    return {"role": "tool", "content": content}


# ------------------------------------------------------------------ Yi-1.5 and Yi-Coder
def test_yi_prompts_the_answer_with_every_user_message_whatever_the_option_says():
    for name in ("yi-1.5", "yi-coder"):
        t = get_template(name)
        with_prompt, without = (t.messages2prompt([u("hi")], add_generation_prompt=g) for g in (True, False))
        assert with_prompt == without and with_prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_yi_15_prints_its_system_prompt_bare_and_yi_coder_boxes_it():
    messages = [s("Be brief."), u("hi")]
    assert get_template("yi-1.5").messages2prompt(messages).startswith("Be brief.<|im_start|>user\n")
    assert get_template("yi-coder").messages2prompt(messages).startswith(
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")


@pytest.mark.parametrize("name", ["yi-1.5", "yi-coder", "openchat-3.6", "qwq-preview", "deepseek-v2.5"])
def test_a_session_only_appends(name):
    session = Session(name, system="Be brief.")
    session.prompt("Hi")
    session.commit("Hello.")
    delta = session.prompt("Again")
    assert not delta.reset and delta.text.count("Again") == 1 and "Hello." not in delta.text


# ------------------------------------------------------------------ QwQ-32B-Preview
def test_qwq_preview_is_qwen25_with_its_own_default_system_prompt():
    t = get_template("QwQ-32B-Preview")
    prompt = t.messages2prompt([u("hi")])
    assert prompt.startswith("<|im_start|>system\nYou are a helpful and harmless assistant. You are Qwen developed by "
                             "Alibaba. You should think step-by-step.<|im_end|>\n")
    assert prompt.endswith("<|im_start|>assistant\n")  # no <think>: the preview reasons in plain text
    assert type(t).tool_format == "hermes" and not type(t).reasoning
    assert (t.temperature, t.top_p, t.top_k, t.repetition_penalty, t.session_len) == (0.7, 0.8, 20, 1.05, 32768)


# ------------------------------------------------------------------ CodeLlama-70b-Instruct
def test_codellama_70b_names_the_destination_only_in_the_generation_prompt():
    t = get_template("CodeLlama-70b-Instruct-hf")
    prompt = t.messages2prompt([s(" sys "), u("q")])
    assert prompt == ("<s>Source: system\n\n sys <step> Source: user\n\n q <step> "
                      "Source: assistant\nDestination: user\n\n ")
    assert t.messages2prompt([u("q"), a("x")], add_generation_prompt=False).endswith(
        "Source: assistant\n\n x <step> Source: assistant\nDestination: user\n\n ")  # printed whatever is asked


def test_codellama_70b_session_resets_with_the_reason_after_each_answer():
    session = Session("codellama-70b")
    session.prompt("Hi")
    session.commit("Hello.")
    delta = session.prompt("Again")
    assert delta.reset and delta.reason and "Destination" in delta.reason
    assert delta.text == ("<s>Source: user\n\n Hi <step> Source: assistant\n\n Hello. <step> Source: user\n\n Again "
                          "<step> Source: assistant\nDestination: user\n\n ")


def test_codellama_70b_refuses_roles_out_of_turn():
    with pytest.raises(ValueError, match="alternate"):
        get_template("codellama-70b").messages2prompt([u("a"), u("b")])


# ------------------------------------------------------------------ DeepSeek-V2.5
def test_deepseek_v25_keeps_the_last_system_message_only():
    t = get_template("DeepSeek-V2.5")
    assert t.messages2prompt([s("A"), u("q"), s("B")]) == "<｜begin▁of▁sentence｜>B<｜User｜>q<｜Assistant｜>"
    assert response_format(t).tools == "deepseek_v3"


CALL_BEGIN, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"


def ds_call(name, args):
    return f"{CALL_BEGIN}function<｜tool▁sep｜>{name}\n```json\n{args}\n```{CALL_END}"


# (label, model output, content, calls)
DEEPSEEK_CASES = [
    ("llama_cpp_one_call", BEGIN + ds_call("special_function", '{"arg1": 1}') + END, "",
     [("special_function", {"arg1": 1})]),
    ("llama_cpp_content_then_call", "Hello, world!\nWhat's up?" + BEGIN + ds_call("special_function", '{"arg1": 1}')
     + END, "Hello, world!\nWhat's up?", [("special_function", {"arg1": 1})]),
    ("vllm_two_calls", BEGIN + ds_call("get_weather", '{"city": "Tokyo"}') + "\n"
     + ds_call("get_time", '{"tz": "Asia/Tokyo"}') + END, "",
     [("get_weather", {"city": "Tokyo"}), ("get_time", {"tz": "Asia/Tokyo"})]),
    ("no_call", "Plain text.", "Plain text.", []),
]


@pytest.mark.parametrize("label, text, content, expected", DEEPSEEK_CASES, ids=[c[0] for c in DEEPSEEK_CASES])
def test_deepseek_v25_reads_v3_calls_whole_and_at_every_split(label, text, content, expected):
    t = get_template("deepseek-v2.5")
    whole = parse_response(t, text)
    assert (whole.content, calls(whole), whole.errors) == (content, expected, [])
    for sizes in [[k, len(text)] for k in range(1, len(text))] + [[1], [3], [7, 2]]:
        parsed = fed_in_sizes(t, text, sizes)
        assert (parsed.content, calls(parsed), parsed.errors) == (content, expected, []), sizes


# ------------------------------------------------------------------ OpenChat 3.6
def test_openchat_36_uses_llama3_headers_with_openchat_roles():
    t = get_template("openchat-3.6-8b-20240522")
    assert t.messages2prompt([s(" S "), u(" q "), a("x"), u("q2")]) == (
        "<|begin_of_text|><|start_header_id|>System<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>GPT4 Correct User<|end_header_id|>\n\nq<|eot_id|>"
        "<|start_header_id|>GPT4 Correct Assistant<|end_header_id|>\n\nx<|eot_id|>"
        "<|start_header_id|>GPT4 Correct User<|end_header_id|>\n\nq2<|eot_id|>"
        "<|start_header_id|>GPT4 Correct Assistant<|end_header_id|>\n\n")
    with pytest.raises(ValueError, match="Only user, assistant and system roles"):
        t.messages2prompt([u("q"), tool("r")])


# ------------------------------------------------------------------ names
@pytest.mark.parametrize("model, name", [
    ("01-ai/Yi-1.5-9B-Chat", "yi-1.5"), ("01-ai/Yi-1.5-34B-Chat", "yi-1.5"), ("01-ai/Yi-1.5-6B-Chat", "yi-1.5"),
    ("01-ai/Yi-Coder-9B-Chat", "yi-coder"), ("01-ai/Yi-Coder-1.5B-Chat", "yi-coder"), ("01-ai/Yi-34B-Chat", "yi"),
    ("Qwen/QwQ-32B-Preview", "qwq-preview"), ("Qwen/QwQ-32B", "qwq"),
    ("codellama/CodeLlama-70b-Instruct-hf", "codellama-70b"),
    ("deepseek-ai/DeepSeek-V2.5", "deepseek-v2.5"), ("deepseek-ai/DeepSeek-V2-Chat", "deepseek-v2"),
    ("openchat/openchat-3.6-8b-20240522", "openchat-3.6"), ("openchat/openchat-3.5-0106", "openchat"),
])
def test_model_names_match(model, name):
    assert match_template(model) == name


@pytest.mark.parametrize("alias, name", [
    ("Yi-1.5-9B-Chat", "yi-1.5"), ("yi-1.5-34b-chat", "yi-1.5"), ("yi-1.5-6b-chat", "yi-1.5"),
    ("Yi-Coder-9B-Chat", "yi-coder"), ("yi-coder-1.5b-chat", "yi-coder"), ("QwQ-32B-Preview", "qwq-preview"),
    ("DeepSeek-V2.5", "deepseek-v2.5"), ("openchat-3.6-8b-20240522", "openchat-3.6"),
])
def test_aliases(alias, name):
    assert get_template(alias).name == name


# ------------------------------------------------------------------ fixed conversations vs the official templates
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Wetter für 北京",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
YI_CONVERSATIONS = [
    [u("q")],
    [s("S"), u("q"), a("x"), u("q2")],
    [s("S"), u("q"), s("later"), {"role": "tool", "content": "r"}, a("x")],  # skipped: later system, tool
    [{"role": "system"}, u("q")],  # a system message without content: nothing printed
    [s(5), u("q")],  # Yi-1.5 prints it, Yi-Coder's concatenation fails
    [u("q"), a("x")],
    [u(5)],  # the official concatenation fails
]
CODELLAMA_CONVERSATIONS = [
    [u("q")],
    [s("  S  "), u(" q "), a(" x "), u("q2")],
    [u("q"), a("x"), u("q2"), a("y")],
    [u("q"), {"role": "tool", "content": "r"}, u("q2")],  # any role in an answer's slot, printed by its name
    [u("q"), u("q2")],  # fails: alternation
    [s("S"), a("x")],  # fails: the user comes first after a system message
    [u({"a": 1}), a(None)],  # trim prints anything; a missing content is ''
]
DEEPSEEK_CONVERSATIONS = [
    [u("q")],
    [s("A"), u("q"), a("x"), s("B"), u("q2")],
    [u("q"), a("c", tool_calls=[{"type": "function", "function": {"name": "f", "arguments": "{}"}}]),
     tool("r1"), tool("r2"), a("done"), u("q2"), tool("r3")],
    [u("q"), {"role": "assistant", "tool_calls": [{"type": "function",
                                                    "function": {"name": "f", "arguments": "{}"}}]}],  # fails
    [{"role": "system"}, u("q")],
    [u("q"), {"role": "critic", "content": "c"}],
]
OPENCHAT_CONVERSATIONS = [
    [u("q")],
    [s("  S\n"), u(" q "), a("\nx\n"), u("q2")],
    [u("q"), tool("r")],  # fails: other roles
    [u(3), a([1])],  # trim prints anything
]
QWQ_CONVERSATIONS = [
    [u("q")],
    [s("S"), u("q"), a("x")],
    [u("q"), a("", tool_calls=[{"type": "function",
                                "function": {"name": "get_weather", "arguments": {"city": "北京"}}}]),
     tool("sunny"), tool("warm"), a("Sunny.")],
]
GOLDEN = (
    [(name, m, {"add_generation_prompt": g}) for name in ("yi-1.5", "yi-coder") for m in YI_CONVERSATIONS
     for g in (True, False)]
    + [("codellama-70b", m, {"add_generation_prompt": g}) for m in CODELLAMA_CONVERSATIONS for g in (True, False)]
    + [("deepseek-v2.5", m, {"add_generation_prompt": g}) for m in DEEPSEEK_CONVERSATIONS for g in (True, False)]
    + [("openchat-3.6", m, {"add_generation_prompt": g}) for m in OPENCHAT_CONVERSATIONS for g in (True, False)]
    + [("qwq-preview", m, {"add_generation_prompt": g, "tools": tools}) for m in QWQ_CONVERSATIONS
       for g in (True, False) for tools in (None, [TOOL])]
)


@pytest.mark.parametrize("name, messages, options", GOLDEN)
def test_fixed_conversations_render_as_the_official_templates_do(name, messages, options):
    assert_same(name, messages, **options)
