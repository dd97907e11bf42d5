"""llguidance's Lark grammars built from typed parts and written out in one place, which does the escaping.

The grammars lmchat builds (a forced tool call in a model's own syntax, the free reasoning before a
constrained answer) are rules (:class:`Rule`) of expressions: a literal text (:class:`Text`), a special token
(:class:`Token`), a regular expression (:class:`Pattern`, :meth:`Pattern.literal` for a text matched as it
is), a rule's name (:class:`Ref`), a JSON schema (:class:`Json`), a grammar of its own (:class:`Nested`), and
sequences, alternatives and repetitions of those (:func:`seq`, :func:`alt`, :func:`opt`, :func:`many`,
:func:`some`). :meth:`Grammar.render` writes the text llguidance reads: a literal in JSON's string syntax
(quotes, backslashes and control characters escaped, any other character as it is), a pattern between
slashes with its own slashes escaped, parentheses where the precedence needs them. Callers give texts, tool
names and token ids, never grammar syntax: a name with a quote or a value with a newline cannot end a literal
early (tests/test_lark.py: any text comes back through llguidance as exactly itself).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Literal, TypeAlias

import attrs

from .jsontypes import JSON

#: JSON written as the templates render it (``tojson``: ", " and ": "), one way: no whitespace for a sampler
#: to wander into
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
#: what a rule's name may be (llguidance's Lark: lower-case names are rules)
RULE_NAME = re.compile(r"[a-z_][a-z0-9_]*")


@attrs.frozen
class Text:
    """This text exactly."""

    text: str


@attrs.frozen
class Token:
    """The special token of this id (llguidance keeps special tokens apart from text)."""

    id: int


@attrs.frozen
class Pattern:
    """A regular expression in llguidance's syntax (Rust's ``regex``)."""

    regex: str

    @classmethod
    def literal(cls, text: str) -> Pattern:
        """``text`` matched as it is, to end a pattern (the lazy lexeme that runs up to a marker)."""
        return cls("".join(c if c.isalnum() or c in " _" or ord(c) >= 128 else f"\\x{ord(c):02x}" for c in text))

    @classmethod
    def excluding(cls, chars: str, bounds: tuple[int, int | None] | None = None) -> Pattern:
        """Any characters but ``chars`` (``bounds``: at least and at most so many; None: any number)."""
        times = "*" if bounds is None else f"{{{bounds[0]},{'' if bounds[1] is None else bounds[1]}}}"
        return cls(f"[^{cls.literal(chars).regex}]{times}")


@attrs.frozen
class Ref:
    """The rule of this name."""

    name: str = attrs.field(validator=lambda _, __, name: _check_name(name))


@attrs.frozen
class Json:
    """A JSON value valid against ``schema``, written compactly (:data:`JSON_OPTIONS`)."""

    schema: Mapping[str, JSON]  # a JSON schema: JSON-shaped, any keyword


@attrs.frozen
class Seq:
    items: tuple[Expr, ...]


@attrs.frozen
class Alt:
    options: tuple[Expr, ...]


@attrs.frozen
class Repeat:
    item: Expr
    times: Literal["?", "*", "+"]


@attrs.frozen
class Nested:
    """A grammar of its own (its ``start``), inside this one: a :class:`Grammar`, or one already written (a
    constraint's, a client's)."""

    grammar: Grammar | str


Expr: TypeAlias = Text | Token | Pattern | Ref | Json | Seq | Alt | Repeat | Nested
#: nothing (a part a syntax leaves out)
EMPTY = Seq(())


@attrs.frozen
class Rule:
    """``name: body``. ``lazy``: the lexeme ends as early as it can (a pattern rule); ``max_tokens``: the
    lexeme is cut after so many tokens."""

    name: str = attrs.field(validator=lambda _, __, name: _check_name(name))
    body: Expr
    lazy: bool = False
    max_tokens: int | None = None

    def render(self) -> str:
        flags = [*(["lazy"] if self.lazy else []),
                 *([f"max_tokens={int(self.max_tokens)}"] if self.max_tokens is not None else [])]
        return f"{self.name}{'[' + ','.join(flags) + ']' if flags else ''}: {_render(self.body)}"


@attrs.frozen
class Grammar:
    """Rules, the first the start (llguidance starts at ``start``)."""

    rules: tuple[Rule, ...]

    def render(self) -> str:
        return "\n".join(rule.render() for rule in self.rules)

    def __add__(self, other: Grammar) -> Grammar:
        return Grammar(self.rules + other.rules)


def seq(*items: Expr) -> Expr:
    """The items one after the other (nested sequences and :data:`EMPTY` flattened; one item is itself)."""
    flat: list[Expr] = []
    for item in items:
        flat += item.items if isinstance(item, Seq) else [item]
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*options: Expr) -> Expr:
    """One of the options (one option is itself)."""
    return options[0] if len(options) == 1 else Alt(options)


def opt(item: Expr) -> Expr:
    return Repeat(item, "?")


def many(item: Expr) -> Expr:
    """Zero or more."""
    return Repeat(item, "*")


def some(item: Expr) -> Expr:
    """One or more."""
    return Repeat(item, "+")


def rules(*pairs: tuple[str, Expr]) -> Grammar:
    return Grammar(tuple(Rule(name, body) for name, body in pairs))


def _check_name(name: str) -> None:
    if not RULE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a rule name")


def _render(expr: Expr, inside: bool = False) -> str:
    """``expr`` as grammar text; ``inside``: a part of a sequence or a repetition, where alternatives (and a
    repeated sequence) need parentheses."""
    if isinstance(expr, Text):
        return _literal(expr.text)
    if isinstance(expr, Token):
        return f"<[{int(expr.id)}]>"
    if isinstance(expr, Pattern):
        return "/" + expr.regex.replace("/", "\\/") + "/"
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, Json):
        return "%json " + json.dumps({**expr.schema, "x-guidance": JSON_OPTIONS}, ensure_ascii=False)
    if isinstance(expr, Nested):
        text = expr.grammar.render() if isinstance(expr.grammar, Grammar) else expr.grammar
        return f"%lark {{\n{text}\n}}"
    if isinstance(expr, Repeat):
        item = _render(expr.item, inside=True)
        return (item if _atomic(expr.item) else f"({item})") + expr.times
    if isinstance(expr, Seq):
        return " ".join(_render(item, inside=True) for item in expr.items)
    text = " | ".join(_render(option) for option in expr.options)
    return f"({text})" if inside else text


def _atomic(expr: Expr) -> bool:
    return not isinstance(expr, (Seq, Alt)) or (isinstance(expr, Seq) and len(expr.items) == 1)


def _literal(text: str) -> str:
    """``text`` as a Lark literal: JSON's string syntax, which the dialect reads, and the characters JSON leaves
    as they are but that print as nothing escaped too (llguidance's lexer refuses a raw DEL)."""
    return "".join(c if c.isprintable() else _escaped(c) for c in json.dumps(text, ensure_ascii=False))


def _escaped(c: str) -> str:
    code = ord(c)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # beyond the BMP: a surrogate pair, as JSON writes it
    return f"\\u{0xd800 + (code >> 10):04x}\\u{0xdc00 + (code & 0x3ff):04x}"
