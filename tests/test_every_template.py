"""Every public entry point, on every registered template: a new template is covered without a new test.

The seed API (``get_prompt``/``decorate_prompt``/``messages2prompt`` with both
``sequence_start`` values), sessions whose answers carry the template's
``lead``, snapshots, the response parser and, where the template exports,
its Jinja twin.
"""
from __future__ import annotations

import datetime as dt
import json

import attrs
import pytest

import lmchat
from lmchat import Session, get_template, parse_response
from lmchat.errors import TemplateConfigError, TemplateRuleError
from lmchat.interop.export import export_problem
from lmchat.interop.loading import AFFIXES as LMDEPLOY_AFFIXES
from lmchat.templates.chatml import ChatML
from lmchat.templates.lmdeploy_twins import LMDEPLOY_TWINS

ALL = lmchat.template_names()
CHAT = [n for n in ALL if get_template(n).capability == "chat"]
DATE = dt.date(2024, 7, 26)
#: a template whose continuation is LMDeploy's own, byte for byte (tests/test_lmdeploy_compat.py), not the rule below
LMDEPLOY_CONTINUATION = {"deepseek-r1-distill"}


def u(text):
    return {"role": "user", "content": text}


def conversation(template):
    """user / answer / user, with a system message when the template renders one."""
    turns = [u("What is 2 + 2?"), {"role": "assistant", "content": "4."}, u("And 3 + 3?")]
    try:
        template.messages2prompt([{"role": "system", "content": "Be brief."}, *turns], date=DATE)
        return [{"role": "system", "content": "Be brief."}, *turns]
    except TemplateRuleError:
        return turns


@pytest.mark.parametrize("name", ALL)
def test_first_turn_prompts_agree(name):
    t = get_template(name)
    if t.capability == "completion":
        assert t.get_prompt("hi") == t.get_prompt("hi", False) == "hi"
        with pytest.raises(TemplateConfigError):
            t.decorate_prompt("hi")
        return
    full = t.messages2prompt([u("hi")])
    assert t.get_prompt("hi") == t.decorate_prompt("hi") == t.decorate_prompt("hi", True) == full
    assert t.messages2prompt("hi") == full  # a bare prompt string is one user turn


def opens_what_the_history_drops(t):
    """Whether the generation prompt opens text that the rendered history of an answer drops (QwQ's ``<think>\\n``):
    the first turn's prompt is no prefix of the conversation that answers it."""
    return not t.messages2prompt([u("hi"), {"role": "assistant", "content": "Hello."}, u("again")]).startswith(
        t.messages2prompt([u("hi")]))


def test_the_templates_whose_prompt_opens_what_the_history_drops_are_found():
    assert {"qwq", "qwen3-thinking-2507", "codellama-70b", "gemma4", "deepseek-r1-distill"} <= \
        {n for n in CHAT if opens_what_the_history_drops(get_template(n))}


@pytest.mark.parametrize("name", CHAT)
def test_continuation_is_what_the_full_rendering_writes_after_an_answer(name):
    """The seed API on every template (docs/getting-started.md, "The LMDeploy interface"): with
    ``sequence_start=False``, what follows an answer's ``eoa`` in the full rendering, for an engine that holds the
    first turn and the answer; a session that appends sends the same. Where the generation prompt opened text
    the history drops, the engine keeps the answer as the model wrote it and the session resets instead (issue
    40, item 11: codellama-70b, gemma4 and qwen3-thinking-2507 raised TemplateRuleError)."""
    t = get_template(name)
    delta = t.decorate_prompt("again", False)
    assert t.get_prompt("again", False) == t.messages2prompt([u("again")], False) == delta
    assert "again" in delta and len(delta) < len(t.messages2prompt([u("again")])) + len(t.eoa) + len(t.lead) + 8
    if name in LMDEPLOY_CONTINUATION:
        return
    full = t.messages2prompt([u("hi"), {"role": "assistant", "content": "Hello."}, u("again")])
    assert full.endswith("Hello." + t.eoa + delta)
    session = Session(t)
    session.prompt("hi")
    session.commit(t.lead + "Hello.")  # raw model output: the lead, then the content
    following = session.prompt("again")
    assert following.reset == opens_what_the_history_drops(t)
    if not following.reset:
        assert following.text == delta


def test_a_history_that_rewrites_the_first_turn_has_no_continuation():
    @attrs.frozen
    class Counting(ChatML):
        def header(self, chat):
            return f"{len(chat.messages)} messages\n"

    with pytest.raises(TemplateRuleError, match="rewrites the first turn's prompt"):
        Counting().decorate_prompt("again", False)


@pytest.mark.parametrize("name", CHAT)
def test_a_session_with_lead_answers_keeps_the_invariant_and_survives_snapshots(name):
    t = get_template(name)
    messages = conversation(t)
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    session = Session(t, system=system, date=DATE)
    first = session.prompt(messages[-3]["content"])
    assert first.text == t.messages2prompt(messages[:-2], date=DATE) and first.sequence_start
    session.commit(t.lead + messages[-2]["content"])
    assert session.messages == lmchat.messages.normalize_messages(messages[:-1])
    snapshot = json.loads(json.dumps(session.to_dict()))
    copy = Session.from_dict(snapshot)
    before = session.context
    delta = session.prompt(messages[-1]["content"])
    full = t.messages2prompt(messages, date=DATE)
    assert (delta.text == full) if delta.reset else (before + delta.text == full)
    assert not delta.reset or not t.prefix_stable, delta.reason
    assert copy.prompt(messages[-1]["content"]) == delta  # the restored session continues identically
    assert copy.to_dict() == session.to_dict()


@pytest.mark.parametrize("name", ALL)
def test_the_parser_returns_a_plain_answer_unchanged(name):
    t = get_template(name)
    text = "Paris is the capital of France."
    parsed = parse_response(t, text)
    assert not parsed.tool_calls
    # a template whose generation prompt opened a think block (QwQ) reads an unclosed answer as reasoning
    assert (parsed.content, parsed.reasoning_content) in ((text, None), ("", text))
    closed = parse_response(t, "hmm</think>\n\n" + text)
    assert closed.content.strip() == text or closed.content == "hmm</think>\n\n" + text


@pytest.mark.parametrize("name", ALL)
def test_export_renders_what_the_template_renders_or_says_why_not(name):
    t = get_template(name)
    problem = export_problem(t)
    if problem:
        with pytest.raises(TemplateConfigError):
            lmchat.interop.export.export_jinja(t)
        return
    twin = lmchat.JinjaTemplate(chat_template=lmchat.interop.export.export_jinja(t),
                                special_tokens={"bos_token": t.bos})
    for generation_prompt in (True, False):
        messages = conversation(t)
        assert twin.messages2prompt(messages, add_generation_prompt=generation_prompt, date=DATE) == \
            t.messages2prompt(messages, add_generation_prompt=generation_prompt, date=DATE)


@pytest.mark.parametrize("name", ALL)
def test_sampling_settings_are_complete(name):
    params = get_template(name).sampling_params
    assert set(params) == {"session_len", "top_p", "top_k", "temperature", "repetition_penalty", "stop_words",
                           "capability"}
    assert params["session_len"] > 0 and 0 < params["top_p"] <= 1 and params["temperature"] >= 0


STRING_FIELDS = ("system", "meta_instruction", "eosys", "user", "eoh", "assistant", "eoa", "separator", "bos")


@pytest.mark.parametrize("name", CHAT)
def test_an_override_is_honoured_or_refused_never_ignored(name, tmp_path):
    t = get_template(name)
    probe = [{"role": "system", "content": "s"}, u("u"), {"role": "assistant", "content": "a"}, u("v")]
    try:
        before = t.messages2prompt(probe)
    except TemplateRuleError:
        probe = probe[1:]
        before = t.messages2prompt(probe)
    for field in STRING_FIELDS:
        value = (getattr(t, field) or "") + "<<marker>>"
        try:
            changed = get_template(name, **{field: value})
        except TemplateConfigError as exc:
            assert exc.field == field and "cannot honour" in str(exc)
            config = tmp_path / f"{field}.json"  # the same refusal through an LMDeploy config
            config.write_text(json.dumps({"model_name": name, field: value}))
            if name in LMDEPLOY_TWINS and field in LMDEPLOY_AFFIXES:  # LMDeploy's own template, which has it
                loaded = lmchat.load_template(str(config))
                assert any("<<marker>>" in loaded.messages2prompt(m) for m in (probe, [u("v")])), field
                continue
            with pytest.raises(TemplateConfigError, match=field):
                lmchat.load_template(str(config))
            continue
        rendered = [changed.messages2prompt(m) for m in (probe, [u("v")])]
        assert any("<<marker>>" in r for r in rendered) or rendered[0] != before, f"{field} ignored"
        if field == "meta_instruction":  # a default system prompt: used when the conversation has none
            assert "<<marker>>" in changed.messages2prompt([u("v")])


def test_meta_instruction_is_the_default_system_prompt_of_code_templates():
    llama2 = get_template("llama2", meta_instruction="Be terse.")
    assert llama2.messages2prompt([u("hi")]) == get_template("llama2").messages2prompt(
        [{"role": "system", "content": "Be terse."}, u("hi")])
    session = Session(llama2)
    assert session.messages[0] == {"role": "system", "content": "Be terse."}
    assert session.prompt("hi").text == llama2.messages2prompt([u("hi")])
    with pytest.raises(TemplateConfigError, match="field 'eoh': template 'qwen3' cannot honour"):
        get_template("qwen3", eoh="X")


@pytest.mark.parametrize("name", CHAT)
def test_reopen_continues_the_last_answer_as_transformers_would(name):
    t = get_template(name)
    session = Session(t, date=DATE)
    session.prompt("Count to five.")
    session.commit(t.lead + "1, 2,")
    before = session.context
    delta = session.reopen()
    opened = t.messages2prompt([u("Count to five."), {"role": "assistant", "content": "1, 2,"}],
                               continue_final_message=True, date=DATE)
    if delta.reset:
        assert delta.text == opened and delta.reason
    else:  # only what follows the answer is dropped: nothing is sent again
        assert delta.text == "" and before[: len(before) - (delta.discard or (0, 0))[1]] == opened
    assert session.context == opened and session.pending
    session.commit(" 3, 4, 5.")
    assert session.messages[-1]["content"] == "1, 2, 3, 4, 5." and session.turns == 1
    after = session.context
    full = t.messages2prompt([u("Count to five."), {"role": "assistant", "content": "1, 2, 3, 4, 5."}, u("Thanks")],
                             date=DATE)
    d = session.prompt("Thanks")
    assert (d.text == full) if d.reset else (after + d.text == full)
