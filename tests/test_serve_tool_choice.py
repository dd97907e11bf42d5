"""A forced ``tool_choice`` (``"required"``, a named function, Responses' ``allowed_tools`` in required mode)
enforced as a grammar of the template's own call syntax (issue 28, item 2), through the real ``openai``
client against ``lmchat serve``'s app (in this process) on the llama.cpp engine and the bundled model with
qwen2.5's template (ChatML, as SmolLM2's; Hermes-style ``<tool_call>`` calls). Sampling stays on (temperature 0.8, three
seeds): every answer must parse as calls of the chosen tools with arguments valid for their parameters.
A template whose call syntax has no grammar yet, and a backend that cannot constrain, answer a 400
``unsupported_value`` on ``tool_choice``.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
           "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}}}
ADD = {"type": "object", "additionalProperties": False, "required": ["a", "b"],
       "properties": {"a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                      "b": {"type": "integer", "minimum": -1000, "maximum": 1000}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": ADD}}]
PARAMETERS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
SEEDS = (1, 2, 3)
SAMPLED = {"model": "smollm2", "temperature": 0.8, "max_tokens": 120}


@pytest.fixture(scope="module")
def client(llama_app):
    return llama_app.openai(timeout=600)


def valid_calls(calls, names) -> list[str]:
    assert calls
    for call in calls:
        assert call.function.name in names, call
        jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])
    return [c.function.name for c in calls]


def test_required_answers_are_one_call_of_a_tool_with_valid_arguments(client):
    for seed in SEEDS:
        r = client.chat.completions.create(messages=ASK, tools=TOOLS, tool_choice="required", seed=seed,
                                           parallel_tool_calls=False, **SAMPLED)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", (seed, choice.message)
        assert len(valid_calls(choice.message.tool_calls, PARAMETERS)) == 1


def test_parallel_calls_are_each_valid(client):
    # parallel_tool_calls (true by default): one or more calls. SmolLM2 tends to call again and again, so an
    # answer may stop at max_tokens: every call it completed is still one of the tools, valid; the last one may be
    # cut off inside its arguments (kept up to its last complete value, with a note: lmchat/tools/calls.py)
    for seed in SEEDS:
        r = client.chat.completions.create(messages=ASK, tools=TOOLS, tool_choice="required", seed=seed, **SAMPLED)
        choice = r.choices[0]
        assert choice.finish_reason in ("tool_calls", "length"), (seed, choice.message)
        calls = choice.message.tool_calls
        cut = choice.finish_reason == "length"
        complete = calls[:-1] if cut else calls
        if complete:
            valid_calls(complete, PARAMETERS)
        assert calls[-1].function.name in PARAMETERS
        content = choice.message.content
        # nothing but calls; a cut answer may end inside the closing marker of its last call ("</tool")
        assert content is None or (choice.finish_reason == "length" and "</tool_call>".startswith(content)), content


def test_a_named_function_is_the_one_called(client):
    for seed in SEEDS:
        r = client.chat.completions.create(messages=ASK, tools=TOOLS, seed=seed, parallel_tool_calls=False,
                                           tool_choice={"type": "function", "function": {"name": "add"}}, **SAMPLED)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", (seed, choice.message)
        assert valid_calls(choice.message.tool_calls, ["add"]) == ["add"]  # one call: parallel_tool_calls false


def test_a_forced_call_streams(client):
    stream = client.chat.completions.create(messages=ASK, tools=TOOLS, tool_choice="required", seed=4,
                                            parallel_tool_calls=False, stream=True, **SAMPLED)
    chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    calls = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    name = next(d.function.name for d in calls if d.function and d.function.name)
    arguments = "".join(d.function.arguments or "" for d in calls if d.function)
    assert name in PARAMETERS
    jsonschema.validate(json.loads(arguments), PARAMETERS[name])


def test_responses_force_a_call_too(client):
    flat = [{"type": "function", **t["function"]} for t in TOOLS]
    for choice, names in [("required", PARAMETERS), ({"type": "function", "name": "get_weather"}, ["get_weather"])]:
        r = client.responses.create(model="smollm2", input=ASK[0]["content"], tools=flat, tool_choice=choice,
                                    temperature=0.8, parallel_tool_calls=False, max_output_tokens=120, store=False)
        calls = [item for item in r.output if item.type == "function_call"]
        assert calls and all(c.name in names for c in calls), r.output
        for c in calls:
            jsonschema.validate(json.loads(c.arguments), PARAMETERS[c.name])


def test_auto_is_not_forced(client):
    r = client.chat.completions.create(messages=[{"role": "user", "content": "Say hello."}], tools=TOOLS,
                                       tool_choice="auto", seed=1, **{**SAMPLED, "max_tokens": 10})
    assert not r.choices[0].message.tool_calls  # the model answered in text: nothing forced it


def test_a_structured_answer_and_a_forced_call_are_refused_together(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(messages=ASK, tools=TOOLS, tool_choice="required",
                                       response_format={"type": "json_object"}, **SAMPLED)
    assert err.value.body["param"] == "response_format" and err.value.body["code"] == "unsupported_value"


@pytest.mark.parametrize("template, says", [("command-r7b", "'command-r7b'"), ("qwen2.5", "cannot constrain")])
def test_templates_without_a_grammar_and_backends_without_constraints_refuse(template, says):
    from .serve_helpers import InProcess

    s = InProcess("--template", template, "--store", "memory")
    try:
        client = s.openai()
        for choice in ("required", {"type": "function", "function": {"name": "add"}}):
            with pytest.raises(openai.BadRequestError) as err:
                client.chat.completions.create(model="echo", messages=ASK, tools=TOOLS, tool_choice=choice)
            assert err.value.body["param"] == "tool_choice" and err.value.body["code"] == "unsupported_value"
            assert says in err.value.body["message"]
        # auto still answers
        assert client.chat.completions.create(model="echo", messages=ASK, tools=TOOLS).choices
    finally:
        s.stop()


def test_the_remote_backend_refuses_a_forced_call_and_passes_a_constraint_after_reasoning_on():
    from lmchat import ConstraintUnsupported, constraints
    from lmchat.backends import get_backend
    from lmchat.tools.forcing import forced_calls

    remote = get_backend("remote", base_url="http://127.0.0.1:9", constraints="response_format")
    with pytest.raises(ConstraintUnsupported) as err:
        remote.check_constraint(forced_calls(TOOLS, "qwen2.5"))
    assert err.value.field == "tool_choice"
    # where the answer starts is the upstream's business (it knows its model's reasoning): the format goes on
    remote.check_constraint(constraints.after_reasoning(constraints.json_object(), "</think>"))
