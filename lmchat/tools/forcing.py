"""``tool_choice`` forced (``"required"`` or a named function): the answer is tool calls, in the syntax the
template's model writes them, each naming a tool of the request with arguments valid for its ``parameters``.

The calls become a :class:`~lmchat.constraints.Constraint` of kind ``lark`` (an llguidance Lark grammar built
from :mod:`lmchat.lark`'s parts, which escape every text; the arguments a ``%json`` schema per tool), so only a
backend that enforces such grammars (the llama.cpp engine) can force a call. The answer is then parsed as any
other, by the template's own tool-call parser, so each grammar below writes exactly what that parser reads back
and what the template renders in the history. A tool-call format without a grammar here is refused: forcing it
cannot be promised.

Markers (``[TOOL_CALLS]``, ``<|action_start|>``, ``<｜tool▁call▁begin｜>``...) are single special tokens in
their models' tokenizers. Given those (``tokens``), the grammar requires the token itself, as the model was
trained to write it: llguidance keeps special tokens apart from text, so a marker written as a string would
make the model spell it out of ordinary tokens. A tokenizer without the marker (a model served with another
family's template) gets it as text, which is all that model can write.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..constraints import Budget, Constraint, check_writable
from ..errors import ConstraintUnsupported
from ..lark import EMPTY, Expr, Grammar, Json, Pattern, Ref, Rule, Text, alt, many, opt, rules, seq, some
from ..registry import template_class, template_names
from ..schema_refs import embedded
from . import forcing_params as by_param
from .base import NAME
from .channel_lead import Mark, gemma4_lead, harmony_lead, marker_writer
from .glm45 import typed as glm45_typed
from .gemma4_args import QUOTE
from .qwen3_coder import typed as qwen3_coder_typed
from .registry import ResponseFormat, response_format

@attrs.frozen
class Tool:
    """One tool a forced call may name: its name and its arguments' schema."""

    name: str
    parameters: dict[str, Any]


@attrs.frozen
class Syntax:
    """A format's grammar in two parts, each given the marker writer: ``start``, what surrounds the calls (given
    ``parallel``), which refers to a rule ``call``; ``calls``, that rule for the chosen tools."""

    start: Callable[[bool, Mark], Grammar]
    calls: Callable[[Sequence[Tool], Mark], Grammar]
    #: what the model writes first, free (:attr:`lmchat.constraints.Constraint.lead`), if the format says
    lead: Callable[[Mark], str] | None = None


CALL = Ref("call")


def _start(body: Expr) -> Grammar:
    return rules(("start", body))


def _any_call(tools: Sequence[Tool]) -> Rule:
    return Rule("call", alt(*(Ref(f"call_{i}") for i in range(len(tools)))))


def _calls(parallel: bool, between: Expr) -> Expr:
    """One call, or (``parallel``) one or more with ``between`` between them."""
    return seq(CALL, many(seq(between, CALL))) if parallel else CALL


def _json_calls(key: str, **optional: dict[str, Any]) -> Callable[[Sequence[Tool], Mark], Grammar]:
    """Calls as one JSON object each, ``{"name": ..., key: {...}}`` (the key the template renders), then the
    ``optional`` members the template renders too."""
    def calls(tools: Sequence[Tool], mark: Mark) -> Grammar:
        # each tool's parameters a resource of their own: their references (#/$defs/...) resolve against them
        schemas = [{"type": "object", "additionalProperties": False, "required": ["name", key],
                    "properties": {"name": {"const": t.name}, key: embedded(t.parameters, f"tools:{i}"), **optional}}
                   for i, t in enumerate(tools)]
        return rules(("call", Json(schemas[0] if len(schemas) == 1 else {"anyOf": schemas})))
    return calls


def _named_calls(head: Callable[[str, Mark], Expr],
                 tail: Callable[[Mark], Expr]) -> Callable[[Sequence[Tool], Mark], Grammar]:
    """Calls whose tool name is text before the JSON arguments (GLM-4, DeepSeek): one rule per tool."""
    def calls(tools: Sequence[Tool], mark: Mark) -> Grammar:
        _writable(tools)
        out = [_any_call(tools)]
        for i, t in enumerate(tools):
            out.append(Rule(f"call_{i}", seq(head(t.name, mark), Ref(f"args_{i}"), tail(mark))))
            out.append(Rule(f"args_{i}", Json(t.parameters)))
        return Grammar(tuple(out))
    return calls


def _writable(tools: Sequence[Tool]) -> None:
    for t in tools:
        if not NAME.fullmatch(t.name):  # the parser reads such a name as text, not a call
            raise ConstraintUnsupported(f"the tool name {t.name!r} cannot be written in this template's call "
                                        "syntax (letters, digits and _ . - : / only)", field="tool_choice")


def _param_calls(call: Callable[[str, Expr, Mark], Expr], param: Callable[[str, by_param.Param, Mark], Expr],
                 sep: Expr = EMPTY, order: Callable[[list[by_param.Param]], list[by_param.Param]] = list
                 ) -> Callable[[Sequence[Tool], Mark], Grammar]:
    """Calls written one parameter at a time (:mod:`.forcing_params`): ``call(name, args, mark)`` around the
    parameters, ``param(tool, p, mark)`` each, in the ``order`` the template writes them, ``sep`` between those
    written."""
    def calls(tools: Sequence[Tool], mark: Mark) -> Grammar:
        _writable(tools)
        out = Grammar((_any_call(tools),))
        for i, t in enumerate(tools):
            items = [(param(t.name, p, mark), p.required) for p in order(by_param.params(t.name, t.parameters))]
            out += Grammar((Rule(f"call_{i}", call(t.name, by_param.optional_rule(items, f"args_{i}"), mark)),))
            out += by_param.in_order(items, f"args_{i}", sep)
        return out
    return calls


def _qwen3_coder_call(name: str, args: Expr, mark: Mark) -> Expr:
    # inside <tool_call>\n...\n</tool_call>, as Hermes' calls (the start rule writes those)
    return seq(Text(f"<function={name}>\n"), args, Text("</function>"))


def _qwen3_coder_param(tool: str, p: by_param.Param, mark: Mark) -> Expr:
    value = by_param.tagged_value(tool, p, qwen3_coder_typed, newlines=False)
    return seq(Text(f"<parameter={p.name}>\n"), value, Text("\n</parameter>\n"))


def _glm45_call(name: str, args: Expr, mark: Mark) -> Expr:
    return seq(mark("<tool_call>"), Text(name), args, Text("\n"), mark("</tool_call>"))


def _glm45_param(tool: str, p: by_param.Param, mark: Mark) -> Expr:
    value = by_param.tagged_value(tool, p, glm45_typed)
    return seq(Text("\n"), mark("<arg_key>"), Text(p.name), mark("</arg_key>"), Text("\n"), mark("<arg_value>"), value,
               mark("</arg_value>"))


def _glm45(parallel: bool, mark: Mark) -> Grammar:
    return _start(_calls(parallel, Text("\n")))


def _chatglm3_call(name: str, args: Expr, mark: Mark) -> Expr:
    # ChatGLM3's format_function_call, as its template renders it: the name line, then the call in a fence
    return seq(Text(name + "\n ```python\ntool_call("), args, Text(")\n```"))


def _chatglm3_param(tool: str, p: by_param.Param, mark: Mark) -> Expr:
    return seq(Text(p.name + "="), by_param.python_value(tool, p))


def _hermes(parallel: bool, mark: Mark) -> Grammar:
    # Qwen2.5's system prompt: <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>
    # a newline may follow the last call: a model that writes one after a tag can still end there
    one = Ref("one")
    calls = seq(one, many(seq(Text("\n"), one))) if parallel else one
    return rules(("start", seq(calls, opt(Text("\n")))),
                 ("one", seq(mark("<tool_call>"), Text("\n"), CALL, Text("\n"), mark("</tool_call>"))))


def _single(parallel: bool, mark: Mark) -> Grammar:
    # Llama 3.1/3.2's templates refuse a message with several calls ("This model only supports single tool-calls
    # at once!"), and GLM-4's and InternLM's answers end with their first call (InternLM's <|action_end|> is a
    # stop word): one call, which parallel_tool_calls allows too
    return _start(CALL)


def _array(marker: str, space: Expr) -> Callable[[bool, Mark], Grammar]:
    """A JSON array of calls after a marker: Mistral's ``[TOOL_CALLS] [...]`` (v0.3; Nemo and the v7 tokenizer's
    models write no space: ``space`` is the grammar of what goes between), Granite's ``<|tool_call|>[...]``."""
    def start(parallel: bool, mark: Mark) -> Grammar:
        return _start(seq(mark(marker), space, Text("["), _calls(parallel, Text(", ")), Text("]")))
    return start


def _phi4_mini(parallel: bool, mark: Mark) -> Grammar:
    """Phi-4-mini: a JSON array of calls between its own tokens, as its model card writes them."""
    return _start(seq(mark("<|tool_call|>"), Text("["), _calls(parallel, Text(", ")), Text("]"),
                      mark("<|/tool_call|>")))


def _internlm(parallel: bool, mark: Mark) -> Grammar:
    return _start(seq(mark("<|action_start|>"), mark("<|plugin|>"), Text("\n"), CALL, mark("<|action_end|>")))


def _deepseek(parallel: bool, mark: Mark) -> Grammar:
    # DeepSeek-R1's template: the calls joined by "\n" between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>
    return _start(seq(mark("<｜tool▁calls▁begin｜>"), _calls(parallel, Text("\n")), mark("<｜tool▁calls▁end｜>")))


def _deepseek_head(name: str, mark: Mark) -> Expr:
    return seq(mark("<｜tool▁call▁begin｜>"), Text("function"), mark("<｜tool▁sep｜>"), Text(name + "\n```json\n"))


def _sections(begin: str, end: str) -> Callable[[bool, Mark], Grammar]:
    """Calls written back to back between two markers (DeepSeek-V3.1, Kimi-K2)."""
    def start(parallel: bool, mark: Mark) -> Grammar:
        return _start(seq(mark(begin), some(CALL) if parallel else CALL, mark(end)))
    return start


def _back_to_back(parallel: bool, mark: Mark) -> Grammar:
    """Calls each with its own opening marker, nothing between (Mistral's v11 tokenizer)."""
    return _start(some(CALL) if parallel else CALL)


def _mistral_v11_head(name: str, mark: Mark) -> Expr:
    # [CALL_ID] is what Small 3.2's template renders before the arguments: the model may write one, and the
    # history then renders back what it wrote
    call_id = opt(seq(mark("[CALL_ID]"), Pattern("[a-zA-Z0-9]{9}")))
    return seq(mark("[TOOL_CALLS]"), Text(name), call_id, mark("[ARGS]"))


def _harmony_head(name: str, mark: Mark) -> Expr:
    return seq(Text(" to=functions." + name), mark("<|channel|>"), Text("commentary json"), mark("<|message|>"))


def _deepseek_v31_head(name: str, mark: Mark) -> Expr:
    return seq(mark("<｜tool▁call▁begin｜>"), Text(name), mark("<｜tool▁sep｜>"))


def _kimi_head(name: str, mark: Mark) -> Expr:
    # the id Kimi-K2 writes, functions.NAME:IDX (the conversation's count of calls: bounded, so that a model
    # cannot write digits for ever), which its template renders in place of the name
    return seq(mark("<|tool_call_begin|>"), Text(f"functions.{name}:"), Pattern("(0|[1-9][0-9]{0,3})"),
               mark("<|tool_call_argument_begin|>"))


def _segments(parallel: bool, mark: Mark) -> Grammar:
    """Functionary v3.2: the prompt wrote the first ``>>>``; each further call is a segment of its own."""
    return _start(_calls(parallel, Text(">>>")))


def _gemma4(parallel: bool, mark: Mark) -> Grammar:
    # calls back to back, then the <|tool_response> the template renders after them (a stop word) or the end
    return _start(seq(some(CALL) if parallel else CALL, opt(mark("<|tool_response>"))))


#: what a parameter's name may be to be written as a bare key that Gemma 4's parser reads back
GEMMA4_KEY = re.compile(r"[\w.\-/]+")


def _gemma4_call(name: str, args: Expr, mark: Mark) -> Expr:
    """``<|tool_call>call:NAME{key:value,...}<tool_call|>``: strings between ``<|"|>`` tokens, numbers and literals
    bare; objects and arrays are refused."""
    return seq(mark("<|tool_call>"), Text(f"call:{name}{{"), args, Text("}"), mark("<tool_call|>"))


def _gemma4_reads(text: str, declared: Any) -> Any:
    return text if declared in (None, "string") else json.loads(text)


def _gemma4_param(tool: str, p: by_param.Param, mark: Mark) -> Expr:
    if not GEMMA4_KEY.fullmatch(p.name):
        raise ConstraintUnsupported(f"the parameter {p.name!r} of {tool!r} cannot be written as a bare key in this "
                                    "template's call syntax", field="tools")
    declared = p.schema.get("type")
    choices = [p.schema["const"]] if "const" in p.schema else p.schema.get("enum")
    strings = declared in (None, "string") and all(isinstance(v, str) for v in choices or ())
    value: Expr
    if strings:
        value = seq(mark(QUOTE), by_param.tagged_value(tool, p, _gemma4_reads), mark(QUOTE))
    elif declared in ("integer", "number"):
        value = by_param.tagged_value(tool, p, _gemma4_reads)
    elif declared == "boolean" and not choices:
        value = alt(Text("true"), Text("false"))
    elif declared == "null":
        value = Text("null")
    else:
        raise ConstraintUnsupported(f"the parameter {p.name!r} of {tool!r} cannot be forced in this template's call "
                                    f"syntax: a value of type {declared!r} (strings, numbers, booleans and null "
                                    "only)", field="tools")
    return seq(Text(p.name + ":"), value)


def _case_insensitively(params: list[by_param.Param]) -> list[by_param.Param]:
    return sorted(params, key=lambda p: p.name.lower())  # the order Gemma 4's template sorts them in


#: the tool-call formats (:data:`lmchat.tools.FORMATS`) a call can be forced in, with their grammar
SYNTAXES: dict[str, Syntax] = {
    "hermes": Syntax(_hermes, _json_calls("arguments")),
    # the whole answer is the call object, as the templates render it (no <|python_tag|>)
    "llama3_json": Syntax(_single, _json_calls("parameters")),
    # the template renders each call's id after its arguments, as Mistral's models were trained on: the model
    # may write one (the parser keeps only an id written before the name and makes the call's own)
    "mistral": Syntax(_array("[TOOL_CALLS]", opt(Text(" "))),
                      _json_calls("arguments", id={"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"})),
    "granite": Syntax(_array("<|tool_call|>", EMPTY), _json_calls("arguments")),
    # Granite 3.3 writes its calls as 3.0/3.1 do (its <response> tags wrap answers, never calls)
    "granite33": Syntax(_array("<|tool_call|>", EMPTY), _json_calls("arguments")),
    "phi4_mini": Syntax(_phi4_mini, _json_calls("arguments")),
    "internlm": Syntax(_internlm, _json_calls("parameters")),
    # GLM-4's template renders a call as an assistant message: the name as its metadata line, then the JSON
    "glm4": Syntax(_single, _named_calls(lambda name, mark: Text(name + "\n"), lambda mark: EMPTY)),
    "deepseek_v3": Syntax(_deepseek, _named_calls(_deepseek_head,
                                                   lambda mark: seq(Text("\n```"), mark("<｜tool▁call▁end｜>")))),
    "deepseek_v31": Syntax(_sections("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
                           _named_calls(_deepseek_v31_head, lambda mark: mark("<｜tool▁call▁end｜>"))),
    "kimi_k2": Syntax(_sections("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
                      _named_calls(_kimi_head, lambda mark: mark("<|tool_call_end|>"))),
    "mistral_v11": Syntax(_back_to_back, _named_calls(_mistral_v11_head, lambda mark: EMPTY)),
    # one call (<|call|> ends the turn), in the header order its template renders (the recipient first), after
    # the model's free reasoning (the lead)
    "harmony": Syntax(_single, _named_calls(_harmony_head, lambda mark: mark("<|call|>")),
                      lead=lambda mark: harmony_lead(mark, final=False)),
    # one parameter at a time (forcing_params): values as the templates render them, typed back by the schema
    "qwen3_coder": Syntax(_hermes, _param_calls(_qwen3_coder_call, _qwen3_coder_param)),
    "glm45": Syntax(_glm45, _param_calls(_glm45_call, _glm45_param)),
    # Functionary v3.1: <function=NAME>{...}</function> back to back (text in Llama 3's tokenizer)
    "functionary_v3_1": Syntax(_back_to_back, _named_calls(lambda name, mark: Text(f"<function={name}>"),
                                                           lambda mark: Text("</function>"))),
    # Functionary v3.2: NAME\n{...}, further calls after ">>>" (the recipient line of each segment)
    "functionary_v3_2": Syntax(_segments, _named_calls(lambda name, mark: Text(name + "\n"), lambda mark: EMPTY)),
    # FireFunction v2: the JSON list after " functools", as its template renders it
    "firefunction_v2": Syntax(_array(" functools", EMPTY), _json_calls("arguments")),
    # the answer is one call: the turn ends at <|observation|>, which the template renders before the result
    "chatglm3": Syntax(_single, _param_calls(_chatglm3_call, _chatglm3_param, sep=Text(", "))),
    # Gemma's notation, after an optional thought channel (the lead); the parameters in the order the template
    # sorts them (case-insensitively), one at a time (forcing_params)
    "gemma4": Syntax(_gemma4, _param_calls(_gemma4_call, _gemma4_param, sep=Text(","), order=_case_insensitively),
                     lead=lambda mark: gemma4_lead(mark)),
}


def forceable() -> str:
    """The formats with a grammar and the registered templates of each, for messages (read each time: a template
    registered later counts)."""
    by_format: dict[str, list[str]] = {fmt: [] for fmt in SYNTAXES}
    for name in template_names():
        fmt = template_class(name).tool_format
        if fmt in by_format:
            by_format[fmt].append(name)
    return "; ".join(f"{fmt} ({', '.join(names) or 'no built-in template'})" for fmt, names in by_format.items())


def forced_calls(tools: Sequence[dict[str, Any]], template: Any, *, names: Sequence[str] | None = None,
                 parallel: bool = False, tokens: Mapping[str, int] | None = None,
                 budget: Budget | None = None) -> Constraint:
    """One call (``parallel``: one or more, where the format can hold several) of ``tools`` (OpenAI's schemas,
    chat's nested shape or Responses' flat one), of those named ``names`` only when given, in ``template``'s
    tool-call syntax. ``tokens``: the model tokenizer's added tokens (text -> id, e.g. the llama.cpp backend's
    ``tokenizer.added``, whose control tokens and ``<...>`` user-defined ones llguidance reads as special); a
    marker among them is required as that token. ``budget``: what the answer can write; a chosen tool whose
    arguments cannot be that short, or whose arguments no JSON is valid against, is refused, naming its
    ``parameters``."""
    fmt = response_format(template).tools
    syntax = SYNTAXES.get(fmt)
    if syntax is None:
        if isinstance(template, ResponseFormat):
            name = None
        else:
            name = template if isinstance(template, str) else getattr(template, "registered_name", None)
        raise ConstraintUnsupported(
            f"a tool call cannot be forced with the template {name or type(template).__name__!r} yet: its tool-call "
            f"format {fmt!r} has no grammar (forced calls: {forceable()}); use tool_choice 'auto'",
            field="tool_choice")
    chosen = []
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if names is not None and fn.get("name") not in names:
            continue
        parameters = fn.get("parameters") or {"type": "object"}
        # a tool whose arguments no JSON satisfies, or none short enough, could be named and never called
        check_writable(parameters, f"tools[{i}].function.parameters" if fn is not tool else f"tools[{i}].parameters",
                       budget)
        chosen.append(Tool(fn.get("name"), parameters))
    if not chosen:
        raise ConstraintUnsupported("no tool to call: the request gives none of those chosen", field="tool_choice")
    mark = marker_writer(tokens)
    grammar = (syntax.start(parallel, mark) + syntax.calls(chosen, mark)).render()
    return Constraint(kind="lark", grammar=grammar, name="tool_choice", lead=syntax.lead(mark) if syntax.lead else "")
