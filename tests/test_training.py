"""encode_for_training on real tokenizers: what is trained and what is masked."""
from __future__ import annotations

import pytest

from lmchat import get_template
from lmchat.interop.training import IGNORE_INDEX, encode_for_training
from lmchat.session.tokens import codec_for, encode_prompt

from . import tokenizers_fixtures as tf

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi <|im_end|> there"},
    {"role": "assistant", "content": "Hello there"},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Ciao"},
]


def trained_text(tok, result):
    pairs = zip(result["input_ids"], result["labels"], strict=True)
    return tok.decode([t for t, label in pairs if label != IGNORE_INDEX])


def test_chatml_trains_answers_and_their_end_marker_only():
    tok = tf.smollm2()
    result = encode_for_training(CONVERSATION, "smollm2", tok)
    assert trained_text(tok, result) == "Hello there<|im_end|>Ciao<|im_end|>"
    assert result["assistant_masks"] == [int(label != IGNORE_INDEX) for label in result["labels"]]
    template = get_template("smollm2")
    chat = template.make_chat(CONVERSATION, add_generation_prompt=False)
    assert result["input_ids"] == encode_prompt(template, chat, codec_for(tok))[1]


def test_user_typed_special_strings_are_text_in_training_data_too():
    tok = tf.smollm2()
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    ids = encode_for_training(CONVERSATION, "smollm2", tok)["input_ids"]
    rendered = get_template("smollm2").messages2prompt(CONVERSATION, add_generation_prompt=False)
    assert ids.count(im_end) == rendered.count("<|im_end|>") - 1


@pytest.mark.parametrize(
    "name, expected",
    [
        ("internlm_chat", "Hello there<eoa>Ciao<eoa>"),  # SUFFIX_AS_EOS: the suffix is the end marker
        ("vicuna", "Hello there</s>Ciao</s>"),  # no suffix: the tokenizer's eos is trained
        ("llama2", " Hello there </s> Ciao </s>"),
    ],
)
def test_xtuner_suffix_semantics_and_eos(name, expected, tmp_path_factory):
    tok = tf.sentencepiece(str(tmp_path_factory.getbasetemp()), legacy=False)
    result = encode_for_training(CONVERSATION, name, tok)
    # SentencePiece decoding moves spaces around special tokens: compare without them
    assert "".join(trained_text(tok, result).split()) == "".join(expected.split())


def test_separators_and_prompts_are_masked():
    tok = tf.deepseek()
    result = encode_for_training(CONVERSATION, "internlm_chat", tok)
    pairs = zip(result["input_ids"], result["labels"], strict=True)
    masked = tok.decode([t for t, label in pairs if label == IGNORE_INDEX])
    assert "Be brief." in masked and "Bye" in masked and "Ciao" not in masked


def test_max_length_cuts_all_three_lists():
    tok = tf.deepseek()
    result = encode_for_training(CONVERSATION, "qwen2.5", tok, max_length=10)
    assert {len(v) for v in result.values()} == {10}


@pytest.mark.parametrize("stem", ["HuggingFaceTB__SmolLM3-3B", "microsoft__Phi-4-reasoning"])
def test_generation_blocks_give_transformers_assistant_mask(stem):
    from . import oracle

    if not oracle.AVAILABLE:
        pytest.skip(f"masks the official template text {stem} ({{% generation %}} blocks): {oracle.SKIP_REASON}")
    from lmchat.interop.jinja import JinjaTemplate

    tok = tf.smollm2()
    source = oracle.template_text(stem)
    conversation = [m for m in CONVERSATION if "<|im_end|>" not in m["content"]]
    template = JinjaTemplate.from_string(source, bos_token="<|im_start|>", eos_token="<|im_end|>")
    ours = encode_for_training(conversation, template, tok)  # today, like transformers
    theirs = tok.apply_chat_template(
        conversation, chat_template=source, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert ours["input_ids"] == theirs["input_ids"]
    assert ours["assistant_masks"] == theirs["assistant_masks"] and sum(ours["assistant_masks"]) > 0
