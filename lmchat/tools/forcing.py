"""``tool_choice`` forced (``"required"`` or a named function): the answer is tool calls, in the syntax the
template's model writes them, each naming a tool of the request with arguments valid for its ``parameters``.

The calls become a :class:`~lmchat.constraints.Constraint` of kind ``lark`` (an llguidance Lark grammar built
from :mod:`lmchat.lark`'s parts, which escape every text; the arguments a ``%json`` schema per tool), so only a
backend that enforces such grammars (the llama.cpp engine) can force a call. The answer is then parsed as any
other, by the template's own tool-call parser, so each syntax's grammar (declared beside its parser, in its
:class:`~.syntax.Syntax` record; the shapes they share in :mod:`.forcing_shapes`) writes exactly what that parser
reads back and what the template renders in the history. A tool-call format without a grammar is refused:
forcing it cannot be promised.

Markers (``[TOOL_CALLS]``, ``<|action_start|>``, ``<｜tool▁call▁begin｜>``...) are single special tokens in
their models' tokenizers. Given those (``tokens``), the grammar requires the token itself, as the model was
trained to write it: llguidance keeps special tokens apart from text, so a marker written as a string would
make the model spell it out of ordinary tokens. A tokenizer without the marker (a model served with another
family's template) gets it as text, which is all that model can write.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from ..constraints import Budget, Constraint, check_writable
from ..errors import ConstraintUnsupported
from ..jsontypes import JSON
from ..registry import template_class, template_names
from .channel_lead import marker_writer
from .registry import SYNTAX_TABLE, ResponseFormat, TemplateLike, response_format
from .syntax import Forcing, Tool

#: the tool-call formats (:data:`lmchat.tools.FORMATS`) a call can be forced in, with their grammar (each
#: declared by its syntax: :data:`.registry.SYNTAX_TABLE`)
SYNTAXES: dict[str, Forcing] = {name: s.forcing for name, s in SYNTAX_TABLE.items() if s.forcing is not None}


def forceable() -> str:
    """The formats with a grammar and the registered templates of each, for messages (read each time: a template
    registered later counts)."""
    by_format: dict[str, list[str]] = {fmt: [] for fmt in SYNTAXES}
    for name in template_names():
        fmt = template_class(name).tool_format
        if fmt in by_format:
            by_format[fmt].append(name)
    return "; ".join(f"{fmt} ({', '.join(names) or 'no built-in template'})" for fmt, names in by_format.items())


def forced_calls(tools: Sequence[JSON], template: TemplateLike, *, names: Sequence[str] | None = None,
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
        chosen.append(Tool(cast(str, fn.get("name")), parameters))  # a string: validate_tools checked each name
    if not chosen:
        raise ConstraintUnsupported("no tool to call: the request gives none of those chosen", field="tool_choice")
    mark = marker_writer(tokens)
    grammar = (syntax.start(parallel, mark) + syntax.calls(chosen, mark)).render()
    return Constraint(kind="lark", grammar=grammar, name="tool_choice", lead=syntax.lead(mark) if syntax.lead else "")
