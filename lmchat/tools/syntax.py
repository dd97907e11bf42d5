"""A tool-call syntax, declared in one place: the record each syntax's module makes (``SYNTAX``), which the
registry (:data:`lmchat.tools.registry.SYNTAX_TABLE`) lists and everything else reads.

A syntax is what a model writes its calls in: how its answers are parsed (``parser``, a :class:`~.base.Format`),
how a forced call is constrained (``forcing``: a grammar writing exactly what the parser reads back and the
template renders, or None where a call cannot be forced), for a syntax that carries the model's reasoning itself
(``Format.reasons``: gpt-oss' harmony, Gemma 4) what a constrained answer comes after (``answer_lead``), and, for
a syntax that writes each argument as text typed by the tool's schema (Qwen3-Coder, GLM-4.5), how such a value
reads back as its declared type (``reads``: the parser types it so, and the grammar only lets through values that
read back as their schema says; Gemma 4's values say their type by their notation). How a call is rendered in
the history is the template's (its Jinja source or its class): several templates share a syntax, and the
round-trip tests check that the grammar writes what each of them renders.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ..jsontypes import JSON, JSONObject
from ..lark import Grammar
from .base import Format
from .channel_lead import Mark

#: how an argument written as text reads back, given the type its schema declares
Reads = Callable[[str, JSON], JSON]


@attrs.frozen
class Tool:
    """One tool a forced call may name: its name and its arguments' schema."""

    name: str
    parameters: JSONObject


@attrs.frozen
class Forcing:
    """A syntax's grammar in two parts, each given the marker writer: ``start``, what surrounds the calls (given
    ``parallel``), which refers to a rule ``call``; ``calls``, that rule for the chosen tools."""

    start: Callable[[bool, Mark], Grammar]
    calls: Callable[[Sequence[Tool], Mark], Grammar]
    #: what the model writes first, free (:attr:`lmchat.constraints.Constraint.lead`), if the syntax says
    lead: Callable[[Mark], str] | None = None


@attrs.frozen
class Syntax:
    """One tool-call syntax: its name (a template's ``tool_format``), its parser, its grammar, its read-back."""

    name: str
    parser: type[Format]
    #: None: a call cannot be forced in this syntax (``tool_choice`` forced is refused, naming those that can)
    forcing: Forcing | None = None
    #: the free reasoning before a constrained answer (structured outputs), for a syntax whose parser splits the
    #: reasoning itself (``reasons``); None there: structured outputs are refused in that syntax
    answer_lead: Callable[[Mark], str] | None = None
    reads: Reads | None = None
