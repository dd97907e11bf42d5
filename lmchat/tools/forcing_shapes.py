"""The shapes forced calls' grammars share (:class:`.syntax.Forcing`'s parts): a syntax's module builds its own
from these, and :mod:`.forcing` puts them together for a request.

``start`` shapes say what surrounds the calls and refer to the rule ``call``; ``calls`` shapes make that rule
for the chosen tools: one JSON object per call (:func:`json_calls`), the tool's name as text before its JSON
arguments (:func:`named_calls`), or one parameter at a time (:func:`param_calls`, :mod:`.forcing_params`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import ConstraintUnsupported
from ..jsontypes import JSONObject
from ..lark import EMPTY, Expr, Grammar, Json, Ref, Rule, Text, alt, many, rules, seq, some
from ..schema_refs import embedded
from . import forcing_params as by_param
from .base import NAME
from .channel_lead import Mark
from .syntax import Tool

CALL = Ref("call")


def start(body: Expr) -> Grammar:
    return rules(("start", body))


def _any_call(tools: Sequence[Tool]) -> Rule:
    return Rule("call", alt(*(Ref(f"call_{i}") for i in range(len(tools)))))


def calls_between(parallel: bool, between: Expr) -> Expr:
    """One call, or (``parallel``) one or more with ``between`` between them."""
    return seq(CALL, many(seq(between, CALL))) if parallel else CALL


def json_calls(key: str, **optional: JSONObject) -> Callable[[Sequence[Tool], Mark], Grammar]:
    """Calls as one JSON object each, ``{"name": ..., key: {...}}`` (the key the template renders), then the
    ``optional`` members the template renders too."""
    def calls(tools: Sequence[Tool], mark: Mark) -> Grammar:
        # each tool's parameters a resource of their own: their references (#/$defs/...) resolve against them
        schemas = [{"type": "object", "additionalProperties": False, "required": ["name", key],
                    "properties": {"name": {"const": t.name}, key: embedded(t.parameters, f"tools:{i}"), **optional}}
                   for i, t in enumerate(tools)]
        return rules(("call", Json(schemas[0] if len(schemas) == 1 else {"anyOf": schemas})))
    return calls


def named_calls(head: Callable[[str, Mark], Expr],
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


def param_calls(call: Callable[[str, Expr, Mark], Expr], param: Callable[[str, by_param.Param, Mark], Expr],
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


def single(parallel: bool, mark: Mark) -> Grammar:
    """One call, which ``parallel_tool_calls`` allows too: Llama 3.1/3.2's templates refuse a message with several
    calls ("This model only supports single tool-calls at once!"), and GLM-4's and InternLM's answers end with
    their first call (InternLM's <|action_end|> is a stop word)."""
    return start(CALL)


def array(marker: str, space: Expr) -> Callable[[bool, Mark], Grammar]:
    """A JSON array of calls after a marker: Mistral's ``[TOOL_CALLS] [...]`` (v0.3; Nemo and the v7 tokenizer's
    models write no space: ``space`` is the grammar of what goes between), Granite's ``<|tool_call|>[...]``."""
    def array_start(parallel: bool, mark: Mark) -> Grammar:
        return start(seq(mark(marker), space, Text("["), calls_between(parallel, Text(", ")), Text("]")))
    return array_start


def sections(begin: str, end: str) -> Callable[[bool, Mark], Grammar]:
    """Calls written back to back between two markers (DeepSeek-V3.1, Kimi-K2)."""
    def sections_start(parallel: bool, mark: Mark) -> Grammar:
        return start(seq(mark(begin), some(CALL) if parallel else CALL, mark(end)))
    return sections_start


def back_to_back(parallel: bool, mark: Mark) -> Grammar:
    """Calls each with its own opening marker, nothing between (Mistral's v11 tokenizer, Functionary v3.1)."""
    return start(some(CALL) if parallel else CALL)
