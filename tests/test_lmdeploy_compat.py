"""LMDeploy's published template tests, run against lmchat's ports (issue 26, item 16).

Expected strings are written from LMDeploy's source, v0.9.2 (the last release
whose lmdeploy/model.py still holds these templates as code):
``BaseChatTemplate.get_prompt`` (lines 184-208) and ``messages2prompt``
(lines 210-234), ``DeepseekV3`` (237-262) and ``DeepseekR1`` (265-282),
``Vicuna`` (340-385, also registered as ``wizardlm``), ``Baichuan2``
(682-699); the tests ported are tests/test_lmdeploy/test_model.py's
``test_model_config``, ``test_vicuna`` and ``test_baichuan``. LMDeploy's
``ChatTemplateConfig(name, **fields).chat_template`` is
``template_from_lmdeploy_config({"model_name": name, **fields})`` here.
"""
from __future__ import annotations

import json

import pytest

import lmchat
from lmchat import Session, get_template
from lmchat.errors import InvalidMessages, TemplateConfigError
from lmchat.interop.loading import template_from_lmdeploy_config

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
#: Vicuna.__init__'s meta_instruction default
VICUNA_META = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
               "helpful, detailed, and polite answers to the user's questions.")
PROMPT = "hello, can u introduce yourself"


def config(name, **fields):
    return template_from_lmdeploy_config({"model_name": name, **fields})


# ---------------------------------------------------------------- deepseek-r1 (the distills' template)

def test_deepseek_r1_distill_continuation_is_lmdeploys():
    t = get_template("deepseek-r1-distill")
    # BaseChatTemplate.get_prompt, sequence_start=False: separator ('') + user + prompt + eoh ('') + assistant;
    # DeepseekV3 adds the bos only with sequence_start, DeepseekR1 adds '<think>\n' only to a first-turn list
    expected = "<｜User｜>" + PROMPT + "<｜Assistant｜>"
    assert t.decorate_prompt(PROMPT, sequence_start=False) == expected
    assert t.get_prompt(PROMPT, sequence_start=False) == expected
    assert t.messages2prompt(PROMPT, sequence_start=False) == expected
    assert t.messages2prompt([{"role": "user", "content": PROMPT}], sequence_start=False) == expected
    # the first turn is unchanged: the Hub template's, '<think>\n' opened
    assert t.decorate_prompt(PROMPT) == BOS + "<｜User｜>" + PROMPT + "<｜Assistant｜><think>\n"


def test_deepseek_r1_distill_continuation_of_messages_is_lmdeploys():
    t = get_template("deepseek-r1-distill")
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "<think>r</think>a"},
        {"role": "user", "content": "v"},
    ]
    # messages2prompt, sequence_start=False: no meta instruction, box + content + eox per message (the
    # reasoning stays, eoa + separator is the eos), then the assistant prefix
    assert t.messages2prompt(messages, sequence_start=False) == (
        "S<｜User｜>u<｜Assistant｜><think>r</think>a" + EOS + "<｜User｜>v<｜Assistant｜>")
    # a final answer is a prefix of the response: its eox is cut
    assert t.messages2prompt(messages[1:3], sequence_start=False) == "<｜User｜>u<｜Assistant｜><think>r</think>a"
    with pytest.raises(InvalidMessages, match="role 'function'"):
        t.messages2prompt([{"role": "function", "content": "x"}], sequence_start=False)
    with pytest.raises(InvalidMessages, match="empty conversation"):
        t.messages2prompt([], sequence_start=False)


def test_deepseek_r1_distill_session_still_resets_after_an_answer():
    # a Session keeps what the rendered history says, which drops the reasoning the engine holds
    session = Session("deepseek-r1-distill")
    session.prompt("hi")
    session.commit("hmm</think>Hello.")
    delta = session.prompt("again")
    assert delta.reset and delta.text == get_template("deepseek-r1-distill").messages2prompt(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
         {"role": "user", "content": "again"}])


# ---------------------------------------------------------------- vicuna / wizardlm

@pytest.mark.parametrize("name", ["llama2", "yi", "qwen-7b", "vicuna"])
def test_model_config(name):
    """test_model_config: a config's meta_instruction reaches the prompt (LMDeploy's 'base' is not ported)."""
    meta = "[fake meta_instruction]"
    assert meta in config(name, meta_instruction=meta).get_prompt("")


def test_vicuna():
    """test_vicuna, with the strings LMDeploy's Vicuna builds."""
    model = config("vicuna", capability="completion")
    assert model.get_prompt(PROMPT, sequence_start=True) == PROMPT
    assert model.get_prompt(PROMPT, sequence_start=False) == PROMPT

    model = config("vicuna", capability="chat", system="Provide answers in Python")
    assert model.system == "Provide answers in Python"
    # `system` is the text before the meta instruction; LMDeploy drops the prompt's last character (the space)
    assert model.get_prompt(PROMPT, sequence_start=True) == \
        f"Provide answers in Python{VICUNA_META} USER: {PROMPT} ASSISTANT:"
    assert model.get_prompt(PROMPT, sequence_start=False) == f"USER: {PROMPT} ASSISTANT:"

    with pytest.raises(TemplateConfigError, match="capability"):
        config("vicuna", capability="voice")


@pytest.mark.parametrize("name", ["vicuna", "wizardlm"])
def test_vicuna_config_renders_lmdeploys_vicuna(name):
    t = config(name, meta_instruction="Be terse.")
    assert t.decorate_prompt("hi") == "Be terse. USER: hi ASSISTANT:"
    conversation = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "v"},
    ]
    # a system message replaces the meta instruction; history keeps 'ASSISTANT: ', the prompt ends 'ASSISTANT:'
    assert t.messages2prompt(conversation) == "S USER: u ASSISTANT: a</s>USER: v ASSISTANT:"
    assert t.messages2prompt(conversation[1:]) == "Be terse. USER: u ASSISTANT: a</s>USER: v ASSISTANT:"
    assert t.stop_words == ("</s>",) and t.lead == " "
    # every LMDeploy field is the Vicuna's own
    t = config(name, system="<s>", eosys="\n", user="H: ", eoh="\n", assistant="B: ", eoa="<e>", separator="|")
    assert t.messages2prompt(conversation[1:]) == \
        f"<s>{VICUNA_META}\nH: u\nB: a<e>|H: v\nB:"
    assert t.decorate_prompt("v", sequence_start=False) == "|H: v\nB:"


def test_vicuna_config_session_sends_lmdeploys_continuation(tmp_path):
    path = tmp_path / "vicuna.json"
    path.write_text(json.dumps({"model_name": "vicuna", "meta_instruction": "Be terse.", "tool": None}))
    t = lmchat.load_template(str(path))
    session = Session(t)
    assert session.prompt("hi").text == "Be terse. USER: hi ASSISTANT:"
    session.commit(" Hello.")  # raw output: the model writes the space LMDeploy cut from the prompt
    assert session.messages[-1]["content"] == "Hello."
    delta = session.prompt("again")
    assert not delta.reset and delta.text == "USER: again ASSISTANT:" == t.decorate_prompt("again", False)


def test_vicuna_config_refuses_an_empty_assistant():
    with pytest.raises(TemplateConfigError, match="field 'assistant'"):
        config("vicuna", assistant="")


def test_vicuna_name_is_still_xtuners_outside_lmdeploy_configs():
    t = get_template("vicuna")
    assert t.messages2prompt([{"role": "user", "content": "hi"}]) == "USER: hi ASSISTANT:"
    assert config("vicuna").messages2prompt([{"role": "user", "content": "hi"}]) == \
        f"{VICUNA_META} USER: hi ASSISTANT:"


# ---------------------------------------------------------------- baichuan2

def test_baichuan():
    """test_baichuan."""
    model = config("baichuan2", capability="completion")
    assert model.get_prompt(PROMPT, sequence_start=True) == PROMPT
    assert model.get_prompt(PROMPT, sequence_start=False) == PROMPT
    assert model.stop_words is None

    model = config("baichuan2", capability="chat")
    assert model.get_prompt(PROMPT, sequence_start=True) == "<reserved_106>" + PROMPT + "<reserved_107>"


def test_baichuan2_config_takes_lmdeploys_fields():
    # meta_instruction is '' (BaseChatTemplate's default), so `system` prints even without a system message
    t = config("baichuan2", system="S:", eosys="\n")
    assert t.decorate_prompt("q") == "S:\n<reserved_106>q<reserved_107>"
    assert t.messages2prompt([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                              {"role": "user", "content": "r"}]) == \
        "S:\n<reserved_106>q<reserved_107>a<reserved_106>r<reserved_107>"
    assert t.decorate_prompt("r", sequence_start=False) == "<reserved_106>r<reserved_107>"
    assert config("baichuan2", meta_instruction="M").decorate_prompt("q") == "M<reserved_106>q<reserved_107>"


def test_xtuner_names_lmdeploy_lacks_still_refuse_affixes():
    with pytest.raises(TemplateConfigError, match="is an XTuner template"):
        config("internlm_chat", system="S")
    with pytest.raises(TemplateConfigError, match="is an XTuner template"):
        config("baichuan2_chat", meta_instruction="M")  # lmchat's spelling: XTuner's template
