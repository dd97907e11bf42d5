"""Forced calls whose arguments are not one JSON object but one value per parameter, each written as the
template renders it: Qwen3-Coder's ``<parameter=KEY>`` blocks and GLM-4.5's ``<arg_key>``/``<arg_value>`` pairs
(a string as it is, any other value as JSON), ChatGLM3's ``tool_call(key=value, ...)`` (Python literals).

Each parameter gets its own grammar from its schema, and the parameters are written in the order the schema
declares them, the required ones always, the others optionally. What such a format cannot write exactly is
refused, naming the parameter: a value is read back by the format's parser, typed by the schema, so the
grammar only writes what reads back as a value the schema accepts.

* A string written as it is cannot hold ``<`` (it would open the next tag), nor a newline in Qwen3-Coder's
  calls, and has no ``pattern`` or ``format`` grammar here; its length bounds are kept.
* ChatGLM3's strings are written as ``repr`` writes them (single quotes), without ``'``, ``\\`` or control
  characters, so that the template renders the call back byte for byte; objects and arrays are refused (JSON's
  ``true`` and ``null`` are no Python literals).
"""
from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence

import attrs

from ..errors import ConstraintUnsupported
from ..jsontypes import JSON, JSONObject
from ..lark import EMPTY, Expr, Grammar, Json, Pattern, Ref, Rule, Text, alt, opt, seq
from ..schema_refs import relocated

#: a number as JSON writes it, at most 16 digits before its point and two in its exponent: a value Python reads as
#: a finite float (JSON's own grammar lets a sampled 1e+338, or 400 digits, through, which read as infinity, and
#: the parser then keeps the text)
FINITE_NUMBER = Pattern(r"-?(0|[1-9][0-9]{0,15})(\.[0-9]+)?([eE][-+]?[0-9]{1,2})?")
#: what a string ``repr`` writes between single quotes cannot hold: its quote, a backslash, control characters
NOT_IN_PYTHON_STRING = "'\\" + "".join(map(chr, range(32))) + "\x7f"
BOUNDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
#: the schema keywords a parameter's own grammar reads; any other is refused rather than ignored
STRING_WORDS = {"type", "enum", "const", "minLength", "maxLength", "description", "title", "default", "examples"}


@attrs.frozen
class Param:
    name: str
    schema: JSONObject
    required: bool


def params(tool: str, schema: JSON) -> list[Param]:
    """A tool's parameters in the order its schema declares them: a flat object of named properties only."""
    def refuse(why: str) -> ConstraintUnsupported:
        return ConstraintUnsupported(f"the parameters of {tool!r} cannot be forced in this template's call syntax: "
                                     f"{why}", field="tools")

    if not isinstance(schema, dict):
        raise refuse("they are not an object")
    schema = relocated(schema)  # each parameter below is written on its own: its references must hold there
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise refuse("they are not an object")
    unknown = set(schema) - {"type", "properties", "required", "additionalProperties", "description", "title",
                             "$schema", "$defs"}
    if unknown:
        raise refuse(f"the keywords {sorted(unknown)} are not supported here (a flat object of properties only)")
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(properties, dict) or not isinstance(required, list):
        raise refuse("'properties' must be an object and 'required' a list")
    missing = [r for r in required if r not in properties]
    if missing:
        raise refuse(f"the required {missing} are not among the properties")
    out = []
    for name in properties:
        prop = relocated(schema, ("properties", name))
        out.append(Param(name, prop if isinstance(prop, dict) else {}, name in required))
    return out


def _refuse(tool: str, param: Param, why: str) -> ConstraintUnsupported:
    return ConstraintUnsupported(f"the parameter {param.name!r} of {tool!r} cannot be forced in this template's "
                                 f"call syntax: {why}", field="tools")


def _number(schema: JSONObject) -> Expr:
    """A JSON value of ``schema``; an unbounded number finite (:data:`FINITE_NUMBER`)."""
    if schema.get("type") == "number" and not BOUNDS & set(schema):
        return FINITE_NUMBER
    return Json(schema)


def _bounds(tool: str, param: Param) -> tuple[int, int | None]:
    lo, hi = param.schema.get("minLength", 0), param.schema.get("maxLength")
    if not isinstance(lo, int) or not (hi is None or isinstance(hi, int)):
        raise _refuse(tool, param, "minLength and maxLength must be integers")
    return lo, hi


def _choices(tool: str, param: Param, written: Callable[[JSON], str], reads: Callable[[str], JSON]) -> Expr | None:
    """``enum`` or ``const`` as alternatives of the texts their values are written as (None: neither given); a
    value whose text would not read back as itself is refused."""
    enum = param.schema.get("enum")
    values: list[JSON]
    if "const" in param.schema:
        values = [param.schema["const"]]
    elif isinstance(enum, list) and enum:
        values = enum
    else:
        return None
    texts = []
    for value in values:
        text = written(value)
        if "<" in text or reads(text) != value:
            raise _refuse(tool, param, f"the value {value!r} would not be read back as itself")
        texts.append(Text(text))
    return alt(*texts)


def tagged_value(tool: str, param: Param, reads: Callable[[str, JSON], JSON], newlines: bool = True) -> Expr:
    """A value between tags (Qwen3-Coder, GLM-4.5): a string as it is, any other value as JSON. ``newlines``:
    whether a string may hold one (not where a newline comes before the closing tag: the grammar's lexer reads
    a text as far as it can, and could not end it before that newline)."""
    declared = param.schema.get("type")
    choices = _choices(tool, param, lambda v: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False),
                       lambda text: reads(text, declared))
    if choices:
        return choices
    if isinstance(declared, list):
        raise _refuse(tool, param, "a value of several types")
    if declared in (None, "string"):
        extra = set(param.schema) - STRING_WORDS
        if extra:
            raise _refuse(tool, param, f"{sorted(extra)} have no grammar for a string written as it is")
        return Pattern.excluding("<" if newlines else "<\n", _bounds(tool, param))
    return _number(param.schema)


def python_value(tool: str, param: Param) -> Expr:
    """A value as ``repr`` writes it (ChatGLM3's ``tool_call(key=value)``)."""
    choices = _choices(tool, param, repr, lambda text: ast.literal_eval(text))
    if choices:
        return choices
    declared = param.schema.get("type")
    if declared == "string":
        extra = set(param.schema) - STRING_WORDS
        if extra:
            raise _refuse(tool, param, f"{sorted(extra)} have no grammar for a Python string")
        return seq(Text("'"), Pattern.excluding(NOT_IN_PYTHON_STRING, _bounds(tool, param)), Text("'"))
    if declared in ("integer", "number"):
        return _number(param.schema)  # a JSON number is a Python number, written alike
    if declared == "boolean":
        return alt(Text("True"), Text("False"))
    if declared == "null":
        return Text("None")
    raise _refuse(tool, param, f"a value of type {declared!r} has no Python-literal grammar here "
                               "(strings, numbers, booleans and None only)")


def in_order(items: Sequence[tuple[Expr, bool]], rule: str, sep: Expr = EMPTY) -> Grammar:
    """Rules ``{rule}_{i}`` for the items (grammar expression, required) in order, the optional ones left out at
    will, ``sep`` between those written. ``{rule}_0`` may be empty when no item is required, as ``{rule}_0?``
    where it is used (see :func:`optional_rule`)."""
    def item(expr: Expr, required: bool) -> Expr:
        return seq(sep, expr) if required else opt(seq(sep, expr))

    out = []
    for i, (expr, req) in enumerate(items):
        alternatives = [seq(expr, *(item(e, r) for e, r in items[i + 1:]))]
        if not req and i + 1 < len(items):
            alternatives.append(Ref(f"{rule}_{i + 1}"))
        out.append(Rule(f"{rule}_{i}", alt(*alternatives)))
        if req:
            break  # a required item is where every sequence passes: no rule after it is referred to as a start
    return Grammar(tuple(out))


def optional_rule(items: Sequence[tuple[Expr, bool]], rule: str) -> Expr:
    """How a sequence of :func:`in_order` is used: ``{rule}_0``, optional when no item is required."""
    if not items:
        return EMPTY
    return Ref(f"{rule}_0") if any(req for _, req in items) else opt(Ref(f"{rule}_0"))
