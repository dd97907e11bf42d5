"""``tool_choice`` forced (``"required"`` or a named function): the answer is tool calls, in the syntax the
template's model writes them, each naming a tool of the request with arguments valid for its ``parameters``.

The calls become a :class:`~lmchat.constraints.Constraint` of kind ``lark`` (an llguidance Lark grammar, the
arguments a ``%json`` schema per tool), so only a backend that enforces such grammars (the llama.cpp engine)
can force a call. The answer is then parsed as any other, by the template's own tool-call parser, so each
grammar below writes exactly what that parser reads back and what the template renders in the history.
A tool-call format without a grammar here is refused: forcing it cannot be promised.

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
from ..registry import template_class, template_names
from ..schema_refs import embedded
from . import forcing_params as by_param
from .base import NAME
from .channel_lead import gemma4_lead, harmony_lead, marker_writer
from .glm45 import typed as glm45_typed
from .gemma4_args import QUOTE
from .qwen3_coder import typed as qwen3_coder_typed
from .registry import ResponseFormat, response_format

#: JSON written as the templates render calls: ``{"name": "f", "arguments": {"x": 1}}``
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@attrs.frozen
class Tool:
    """One tool a forced call may name: its name and its arguments' schema."""

    name: str
    parameters: dict[str, Any]


@attrs.frozen
class Syntax:
    """A format's grammar in two parts, each given the marker writer: ``start``, what surrounds the calls (given
    ``parallel``), which refers to a rule ``call``; ``calls``, that rule for the chosen tools."""

    start: Callable[[bool, Callable[[str], str]], str]
    calls: Callable[[Sequence[Tool], Callable[[str], str]], str]
    #: what the model writes first, free (:attr:`lmchat.constraints.Constraint.lead`), if the format says
    lead: Callable[[Callable[[str], str]], str] | None = None


def _schema(schema: dict[str, Any]) -> str:
    return json.dumps({**schema, "x-guidance": JSON_OPTIONS}, ensure_ascii=False)


def _json_calls(key: str, **optional: dict[str, Any]) -> Callable[[Sequence[Tool], Callable[[str], str]], str]:
    """Calls as one JSON object each, ``{"name": ..., key: {...}}`` (the key the template renders), then the
    ``optional`` members the template renders too."""
    def calls(tools: Sequence[Tool], mark: Callable[[str], str]) -> str:
        # each tool's parameters a resource of their own: their references (#/$defs/...) resolve against them
        schemas = [{"type": "object", "additionalProperties": False, "required": ["name", key],
                    "properties": {"name": {"const": t.name}, key: embedded(t.parameters, f"tools:{i}"), **optional}}
                   for i, t in enumerate(tools)]
        return f"call: %json {_schema(schemas[0] if len(schemas) == 1 else {'anyOf': schemas})}"
    return calls


def _named_calls(head: Callable[[str, Callable[[str], str]], str],
                 tail: Callable[[Callable[[str], str]], str]) -> Callable[[Sequence[Tool], Callable[[str], str]], str]:
    """Calls whose tool name is text before the JSON arguments (GLM-4, DeepSeek): one rule per tool."""
    def calls(tools: Sequence[Tool], mark: Callable[[str], str]) -> str:
        _writable(tools)
        rules = [f"call: {' | '.join(f'call_{i}' for i in range(len(tools)))}"]
        for i, t in enumerate(tools):
            rules.append(f"call_{i}: {head(t.name, mark)} args_{i} {tail(mark)}")
            rules.append(f"args_{i}: %json {_schema(t.parameters)}")
        return "\n".join(rules)
    return calls


def _text(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _writable(tools: Sequence[Tool]) -> None:
    for t in tools:
        if not NAME.fullmatch(t.name):  # the parser reads such a name as text, not a call
            raise ConstraintUnsupported(f"the tool name {t.name!r} cannot be written in this template's call "
                                        "syntax (letters, digits and _ . - : / only)", field="tool_choice")


def _param_calls(call: Callable[[str, str, Callable[[str], str]], str],
                 param: Callable[[str, by_param.Param, Callable[[str], str]], str],
                 sep: str = "") -> Callable[[Sequence[Tool], Callable[[str], str]], str]:
    """Calls written one parameter at a time (:mod:`.forcing_params`): ``call(name, args, mark)`` around the
    parameters, ``param(tool, p, mark)`` each, ``sep`` between those written."""
    def calls(tools: Sequence[Tool], mark: Callable[[str], str]) -> str:
        _writable(tools)
        rules = [f"call: {' | '.join(f'call_{i}' for i in range(len(tools)))}"]
        for i, t in enumerate(tools):
            items = [(param(t.name, p, mark), p.required) for p in by_param.params(t.name, t.parameters)]
            rules.append(f"call_{i}: {call(t.name, by_param.optional_rule(items, f'args_{i}'), mark)}")
            rules += by_param.in_order(items, f"args_{i}", sep)
        return "\n".join(rules)
    return calls


def _qwen3_coder_call(name: str, args: str, mark: Callable[[str], str]) -> str:
    # inside <tool_call>\n...\n</tool_call>, as Hermes' calls (the start rule writes those)
    return f'{_text("<function=" + name + ">" + chr(10))} {args} "</function>"'


def _qwen3_coder_param(tool: str, p: by_param.Param, mark: Callable[[str], str]) -> str:
    value = by_param.tagged_value(tool, p, qwen3_coder_typed, newlines=False)
    key = _text("<parameter=" + p.name + ">\n")
    return f'{key} {value} "\\n</parameter>\\n"'


def _glm45_call(name: str, args: str, mark: Callable[[str], str]) -> str:
    return f'{mark("<tool_call>")} {_text(name)} {args} "\\n" {mark("</tool_call>")}'


def _glm45_param(tool: str, p: by_param.Param, mark: Callable[[str], str]) -> str:
    value = by_param.tagged_value(tool, p, glm45_typed)
    return f'"\\n" {mark("<arg_key>")} {_text(p.name)} {mark("</arg_key>")} "\\n" {mark("<arg_value>")} {value} ' \
           f'{mark("</arg_value>")}'


def _glm45(parallel: bool, mark: Callable[[str], str]) -> str:
    more = ' ("\\n" call)*' if parallel else ""
    return f"start: call{more}"


def _chatglm3_call(name: str, args: str, mark: Callable[[str], str]) -> str:
    # ChatGLM3's format_function_call, as its template renders it: the name line, then the call in a fence
    head = _text(name + "\n ```python\ntool_call(")
    return f'{head} {args} ")\\n```"'


def _chatglm3_param(tool: str, p: by_param.Param, mark: Callable[[str], str]) -> str:
    return f"{_text(p.name + '=')} {by_param.python_value(tool, p)}"


def _hermes(parallel: bool, mark: Callable[[str], str]) -> str:
    # Qwen2.5's system prompt: <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>
    # a newline may follow the last call: a model that writes one after a tag can still end there
    calls = 'one ("\\n" one)* "\\n"?' if parallel else 'one "\\n"?'
    return f'start: {calls}\none: {mark("<tool_call>")} "\\n" call "\\n" {mark("</tool_call>")}'


def _single(parallel: bool, mark: Callable[[str], str]) -> str:
    # Llama 3.1/3.2's templates refuse a message with several calls ("This model only supports single tool-calls
    # at once!"), and GLM-4's and InternLM's answers end with their first call (InternLM's <|action_end|> is a
    # stop word): one call, which parallel_tool_calls allows too
    return "start: call"


def _array(marker: str, space: str) -> Callable[[bool, Callable[[str], str]], str]:
    """A JSON array of calls after a marker: Mistral's ``[TOOL_CALLS] [...]`` (v0.3; Nemo and the v7 tokenizer's
    models write no space: ``space`` is the grammar of what goes between), Granite's ``<|tool_call|>[...]``."""
    def start(parallel: bool, mark: Callable[[str], str]) -> str:
        more = ' (", " call)*' if parallel else ""
        return f'start: {mark(marker)} {space}"[" call{more} "]"'
    return start


def _phi4_mini(parallel: bool, mark: Callable[[str], str]) -> str:
    """Phi-4-mini: a JSON array of calls between its own tokens, as its model card writes them."""
    more = ' (", " call)*' if parallel else ""
    return f'start: {mark("<|tool_call|>")} "[" call{more} "]" {mark("<|/tool_call|>")}'


def _internlm(parallel: bool, mark: Callable[[str], str]) -> str:
    return f'start: {mark("<|action_start|>")} {mark("<|plugin|>")} "\\n" call {mark("<|action_end|>")}'


def _deepseek(parallel: bool, mark: Callable[[str], str]) -> str:
    # DeepSeek-R1's template: the calls joined by "\n" between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>
    more = ' ("\\n" call)*' if parallel else ""
    return f'start: {mark("<｜tool▁calls▁begin｜>")} call{more} {mark("<｜tool▁calls▁end｜>")}'


def _deepseek_head(name: str, mark: Callable[[str], str]) -> str:
    line = _text(name + "\n```json\n")
    return f'{mark("<｜tool▁call▁begin｜>")} "function" {mark("<｜tool▁sep｜>")} {line}'


def _sections(begin: str, end: str) -> Callable[[bool, Callable[[str], str]], str]:
    """Calls written back to back between two markers (DeepSeek-V3.1, Kimi-K2)."""
    def start(parallel: bool, mark: Callable[[str], str]) -> str:
        return f"start: {mark(begin)} call{'+' if parallel else ''} {mark(end)}"
    return start


def _back_to_back(parallel: bool, mark: Callable[[str], str]) -> str:
    """Calls each with its own opening marker, nothing between (Mistral's v11 tokenizer)."""
    return f"start: call{'+' if parallel else ''}"


def _mistral_v11_head(name: str, mark: Callable[[str], str]) -> str:
    # [CALL_ID] is what Small 3.2's template renders before the arguments: the model may write one, and the
    # history then renders back what it wrote
    call_id = f'({mark("[CALL_ID]")} /[a-zA-Z0-9]{{9}}/)?'
    return f'{mark("[TOOL_CALLS]")} {_text(name)} {call_id} {mark("[ARGS]")}'


def _harmony_head(name: str, mark: Callable[[str], str]) -> str:
    return f'{_text(" to=functions." + name)} {mark("<|channel|>")} "commentary json" {mark("<|message|>")}'


def _deepseek_v31_head(name: str, mark: Callable[[str], str]) -> str:
    return f'{mark("<｜tool▁call▁begin｜>")} {_text(name)} {mark("<｜tool▁sep｜>")}'


def _kimi_head(name: str, mark: Callable[[str], str]) -> str:
    # the id Kimi-K2 writes, functions.NAME:IDX (the conversation's count of calls: bounded, so that a model
    # cannot write digits for ever), which its template renders in place of the name
    return f'{mark("<|tool_call_begin|>")} {_text("functions." + name + ":")} /(0|[1-9][0-9]{{0,3}})/ ' \
           f'{mark("<|tool_call_argument_begin|>")}'


def _segments(parallel: bool, mark: Callable[[str], str]) -> str:
    """Functionary v3.2: the prompt wrote the first ``>>>``; each further call is a segment of its own."""
    return 'start: call (">>>" call)*' if parallel else "start: call"


def _gemma4(parallel: bool, mark: Callable[[str], str]) -> str:
    # calls back to back, then the <|tool_response> the template renders after them (a stop word) or the end
    return f"start: call{'+' if parallel else ''} {mark('<|tool_response>')}?"


#: what a parameter's name may be to be written as a bare key that Gemma 4's parser reads back
GEMMA4_KEY = re.compile(r"[\w.\-/]+")


def _gemma4_calls(tools: Sequence[Tool], mark: Callable[[str], str]) -> str:
    """``<|tool_call>call:NAME{key:value,...}<tool_call|>``, the parameters in the order the template sorts them
    (case-insensitively), one at a time (:mod:`.forcing_params`): strings between ``<|"|>`` tokens, numbers and
    literals bare; objects and arrays are refused."""
    _writable(tools)
    rules = [f"call: {' | '.join(f'call_{i}' for i in range(len(tools)))}"]
    for i, t in enumerate(tools):
        params = sorted(by_param.params(t.name, t.parameters), key=lambda p: p.name.lower())
        items = [(_gemma4_param(t.name, p, mark), p.required) for p in params]
        args = by_param.optional_rule(items, f"args_{i}")
        rules.append(f'call_{i}: {mark("<|tool_call>")} {_text("call:" + t.name + "{")} {args} "}}" '
                     f'{mark("<tool_call|>")}')
        rules += by_param.in_order(items, f"args_{i}", '","')
    return "\n".join(rules)


def _gemma4_reads(text: str, declared: Any) -> Any:
    return text if declared in (None, "string") else json.loads(text)


def _gemma4_param(tool: str, p: by_param.Param, mark: Callable[[str], str]) -> str:
    if not GEMMA4_KEY.fullmatch(p.name):
        raise ConstraintUnsupported(f"the parameter {p.name!r} of {tool!r} cannot be written as a bare key in this "
                                    "template's call syntax", field="tools")
    declared = p.schema.get("type")
    choices = [p.schema["const"]] if "const" in p.schema else p.schema.get("enum")
    strings = declared in (None, "string") and all(isinstance(v, str) for v in choices or ())
    if strings:
        value = f'{mark(QUOTE)} {by_param.tagged_value(tool, p, _gemma4_reads)} {mark(QUOTE)}'
    elif declared in ("integer", "number"):
        value = by_param.tagged_value(tool, p, _gemma4_reads)
    elif declared == "boolean" and not choices:
        value = '("true" | "false")'
    elif declared == "null":
        value = '"null"'
    else:
        raise ConstraintUnsupported(f"the parameter {p.name!r} of {tool!r} cannot be forced in this template's call "
                                    f"syntax: a value of type {declared!r} (strings, numbers, booleans and null "
                                    "only)", field="tools")
    return f"{_text(p.name + ':')} {value}"


#: the tool-call formats (:data:`lmchat.tools.FORMATS`) a call can be forced in, with their grammar
SYNTAXES: dict[str, Syntax] = {
    "hermes": Syntax(_hermes, _json_calls("arguments")),
    # the whole answer is the call object, as the templates render it (no <|python_tag|>)
    "llama3_json": Syntax(_single, _json_calls("parameters")),
    # the template renders each call's id after its arguments, as Mistral's models were trained on: the model
    # may write one (the parser keeps only an id written before the name and makes the call's own)
    "mistral": Syntax(_array("[TOOL_CALLS]", '" "? '),
                      _json_calls("arguments", id={"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"})),
    "granite": Syntax(_array("<|tool_call|>", ""), _json_calls("arguments")),
    # Granite 3.3 writes its calls as 3.0/3.1 do (its <response> tags wrap answers, never calls)
    "granite33": Syntax(_array("<|tool_call|>", ""), _json_calls("arguments")),
    "phi4_mini": Syntax(_phi4_mini, _json_calls("arguments")),
    "internlm": Syntax(_internlm, _json_calls("parameters")),
    # GLM-4's template renders a call as an assistant message: the name as its metadata line, then the JSON
    "glm4": Syntax(_single, _named_calls(lambda name, mark: _text(name + "\n"), lambda mark: "")),
    "deepseek_v3": Syntax(_deepseek, _named_calls(_deepseek_head,
                                                   lambda mark: f'"\\n```" {mark("<｜tool▁call▁end｜>")}')),
    "deepseek_v31": Syntax(_sections("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
                           _named_calls(_deepseek_v31_head, lambda mark: mark("<｜tool▁call▁end｜>"))),
    "kimi_k2": Syntax(_sections("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
                      _named_calls(_kimi_head, lambda mark: mark("<|tool_call_end|>"))),
    "mistral_v11": Syntax(_back_to_back, _named_calls(_mistral_v11_head, lambda mark: "")),
    # one call (<|call|> ends the turn), in the header order its template renders (the recipient first), after
    # the model's free reasoning (the lead)
    "harmony": Syntax(_single, _named_calls(_harmony_head, lambda mark: mark("<|call|>")),
                      lead=lambda mark: harmony_lead(mark, final=False)),
    # one parameter at a time (forcing_params): values as the templates render them, typed back by the schema
    "qwen3_coder": Syntax(_hermes, _param_calls(_qwen3_coder_call, _qwen3_coder_param)),
    "glm45": Syntax(_glm45, _param_calls(_glm45_call, _glm45_param)),
    # Functionary v3.1: <function=NAME>{...}</function> back to back (text in Llama 3's tokenizer)
    "functionary_v3_1": Syntax(_back_to_back, _named_calls(lambda name, mark: _text(f"<function={name}>"),
                                                           lambda mark: '"</function>"')),
    # Functionary v3.2: NAME\n{...}, further calls after ">>>" (the recipient line of each segment)
    "functionary_v3_2": Syntax(_segments, _named_calls(lambda name, mark: _text(name + "\n"), lambda mark: "")),
    # FireFunction v2: the JSON list after " functools", as its template renders it
    "firefunction_v2": Syntax(_array(" functools", ""), _json_calls("arguments")),
    # the answer is one call: the turn ends at <|observation|>, which the template renders before the result
    "chatglm3": Syntax(_single, _param_calls(_chatglm3_call, _chatglm3_param, sep='", "')),
    # Gemma's notation, after an optional thought channel (the lead)
    "gemma4": Syntax(_gemma4, _gemma4_calls, lead=lambda mark: gemma4_lead(mark)),
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
    grammar = f"{syntax.start(parallel, mark)}\n{syntax.calls(chosen, mark)}"
    return Constraint(kind="lark", grammar=grammar, name="tool_choice", lead=syntax.lead(mark) if syntax.lead else "")
