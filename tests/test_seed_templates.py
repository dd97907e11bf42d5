"""Strings written from the seed documents in ../shared/seeds (LMDeploy's and XTuner's templates)."""
from __future__ import annotations

import pytest

import lmchat
from lmchat import Session, get_template
from lmchat.errors import TemplateConfigError

META = (
    "You are an AI assistant whose name is InternLM (书生·浦语).\n"
    "- InternLM (书生·浦语) is a conversational language model that is developed by Shanghai AI Laboratory "
    "(上海人工智能实验室). It is designed to be helpful, honest, and harmless.\n"
    "- InternLM (书生·浦语) can understand and communicate fluently in the language chosen by the user such as "
    "English and 中文.\n"
)


def test_internlm_chat_7b_first_turn_matches_seed():
    expected = f"<|System|>:{META}\n<|User|>:你叫什么名字？\n<|Bot|>:"
    t = get_template("internlm-chat-7b")
    assert t.get_prompt("你叫什么名字？") == expected
    assert t.decorate_prompt("你叫什么名字？", sequence_start=True) == expected
    assert t.messages2prompt("你叫什么名字？") == expected


def test_internlm_chat_7b_later_turn_matches_seed():
    assert get_template("internlm-chat-7b").decorate_prompt("U2", sequence_start=False) == "\n<|User|>:U2\n<|Bot|>:"


def test_internlm_chat_7b_session_concatenates_seed_pieces():
    s = Session("internlm-chat-7b")
    assert s.prompt("U1").text == f"<|System|>:{META}\n<|User|>:U1\n<|Bot|>:"
    s.commit("A1")
    assert s.prompt("U2").text == "\n<|User|>:U2\n<|Bot|>:"
    assert s.context.endswith("<|Bot|>:A1<eoa>\n<|User|>:U2\n<|Bot|>:")


def test_internlm_hyperparameters_from_seed():
    assert get_template("internlm-chat-7b").stop_words == ("<eoa>",)
    assert get_template("internlm-chat-7b").session_len == 2048
    assert get_template("internlm-chat-7b-8k").session_len == 8192
    assert get_template("internlm-chat-20b").session_len == 8192
    base = get_template("internlm-7b")
    assert (base.session_len, base.top_p, base.top_k, base.temperature, base.repetition_penalty) == \
        (2048, 0.8, None, 0.8, 1.0)
    assert base.capability == "completion" and base.stop_words is None
    assert get_template("internlm-20b").session_len == 4096


def test_completion_templates_return_prompt_unchanged():
    for name in ("internlm-7b", "internlm-20b"):
        t = get_template(name)
        assert t.get_prompt("续写：从前有座山", sequence_start=True) == "续写：从前有座山"
        with pytest.raises(TemplateConfigError):
            t.decorate_prompt("x")


#: XTuner's internlm_chat multi-turn example (seed 003), placeholders kept literally
XTUNER_SEED_MESSAGES = [
    {"role": "system", "content": "{system}"},
    {"role": "user", "content": "{input}"},
    {"role": "assistant", "content": "{output}"},
    {"role": "user", "content": "{input}"},
    {"role": "assistant", "content": "{output}"},
]
XTUNER_SEED_TEXT = (
    "<|System|>:{system}\n<|User|>:{input}<eoh>\n<|Bot|>:{output}<eoa>\n"
    "<|User|>:{input}<eoh>\n<|Bot|>:{output}<eoa>\n"
)


def test_xtuner_internlm_chat_multi_turn_matches_seed():
    rendered = get_template("internlm_chat").messages2prompt(XTUNER_SEED_MESSAGES, add_generation_prompt=False)
    assert rendered == XTUNER_SEED_TEXT


def test_xtuner_suffix_is_the_kept_end_marker():
    s = Session("internlm_chat", system="S")
    s.prompt("Q1")
    s.commit("A1")
    assert s.prompt("Q2").text == "\n<|User|>:Q2<eoh>\n<|Bot|>:"


def test_xtuner_rounds_come_from_the_session():
    s = Session("chatglm2")
    assert s.prompt("a").text == "[Round 1]\n\n问：a\n\n答："
    s.commit("b")
    assert s.prompt("c").text == "</s>\n\n[Round 2]\n\n问：c\n\n答："


@pytest.mark.parametrize(
    "name, first",
    [
        ("default", "<|System|>:S\n<|User|>:Q\n<|Bot|>:"),
        ("vicuna", "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                   "helpful, detailed, and polite answers to the user's questions. S\n USER: Q ASSISTANT:"),
        ("baichuan_chat", "S\n<reserved_102>Q<reserved_103>"),
        ("baichuan2_chat", "S\n<reserved_106>Q<reserved_107>"),
        ("wizardlm", "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                     "helpful, detailed, and polite answers to the user's questions. S\n USER: Q ASSISTANT:"),
    ],
)
def test_xtuner_templates(name, first):
    assert get_template(name).messages2prompt(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]) == first


XTUNER_TABLE = """
baichuan-inc/Baichuan-7B default
baichuan-inc/Baichuan-13B-Base default
baichuan-inc/Baichuan-13B-Chat baichuan_chat
baichuan-inc/Baichuan2-7B-Base default
baichuan-inc/Baichuan2-7B-Chat baichuan2_chat
baichuan-inc/Baichuan2-13B-Base default
baichuan-inc/Baichuan2-13B-Chat baichuan2_chat
THUDM/chatglm2-6b chatglm2
THUDM/chatglm3-6b chatglm3
THUDM/chatglm3-6b-base chatglm3
deepseek-ai/deepseek-coder-6.7b-base deepseek_coder
deepseek-ai/deepseek-coder-6.7b-instruct deepseek_coder
internlm/internlm-7b default
internlm/internlm-20b default
internlm/internlm-chat-7b internlm_chat
internlm/internlm-chat-20b internlm_chat
huggyllama/llama-7b default
meta-llama/Llama-2-7b-hf llama2_chat
meta-llama/Llama-2-7b-chat-hf llama2_chat
meta-llama/Llama-2-70b-hf llama2_chat
lmsys/vicuna-7b-v1.5 vicuna
lmsys/vicuna-13b-v1.5 vicuna
mistralai/Mistral-7B-v0.1 mistral
mistralai/Mixtral-8x7B-v0.1 mixtral
mistralai/Mixtral-8x7B-Instruct-v0.1 mixtral
Qwen/Qwen-1_8B default
Qwen/Qwen-1_8B-Chat qwen_chat
Qwen/Qwen-7B default
Qwen/Qwen-7B-Chat qwen_chat
Qwen/Qwen-72B default
Qwen/Qwen-72B-Chat qwen_chat
bigcode/starcoder default
01-ai/Yi-6B default
01-ai/Yi-34B default
HuggingFaceH4/zephyr-7b-beta zephyr
deepseek-ai/deepseek-moe-16b-base deepseek_moe
deepseek-ai/deepseek-moe-16b-chat deepseek_moe
internlm/internlm2-1_8b default
internlm/internlm2-7b default
internlm/internlm2-20b default
internlm/internlm2-chat-1_8b internlm2_chat
internlm/internlm2-chat-7b internlm2_chat
internlm/internlm2-chat-20b internlm2_chat
Qwen/Qwen1.5-0.5B default
Qwen/Qwen1.5-0.5B-Chat qwen_chat
Qwen/Qwen1.5-1.8B default
Qwen/Qwen1.5-1.8B-Chat qwen_chat
Qwen/Qwen1.5-4B default
Qwen/Qwen1.5-4B-Chat qwen_chat
Qwen/Qwen1.5-7B default
Qwen/Qwen1.5-7B-Chat qwen_chat
Qwen/Qwen1.5-14B default
Qwen/Qwen1.5-14B-Chat qwen_chat
Qwen/Qwen1.5-72B default
Qwen/Qwen1.5-72B-Chat qwen_chat
google/gemma-2b default
google/gemma-2b-it gemma
google/gemma-7b default
google/gemma-7b-it gemma
"""


@pytest.mark.parametrize("model, xtuner_name", [line.split() for line in XTUNER_TABLE.strip().splitlines()])
def test_xtuner_model_table_resolves(model, xtuner_name):
    """Every row of XTuner's model -> template table (seed 003) resolves to the registered name."""
    from lmchat.registry import canonical_name

    assert lmchat.match_template(model) == canonical_name(xtuner_name)
