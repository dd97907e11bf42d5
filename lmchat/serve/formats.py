"""Structured outputs: ``response_format`` (chat and completions) and ``text.format`` (Responses) as a
:class:`~lmchat.constraints.Constraint`, in the shapes the ``openai`` client sends.

A malformed format is a 400 naming the client's own field (``response_format.json_schema.schema``,
``text.format.name``...). So is a format the backend cannot enforce (the echo backend, hf, a remote
upstream that takes no constraint): it is refused here, before any session is read or made, rather than
answered unconstrained. So is a schema no JSON is valid against, or whose shortest valid JSON is longer than
the answer's ``max_tokens`` can write (:func:`lmchat.constraints.check_writable`). ``strict`` is accepted either
way: every constraint is enforced whole.

The backend compiles each format here, to refuse what it cannot enforce: in the server's worker threads, never
on the event loop (a grammar's compile and its lexer's first step can take seconds).
"""
from __future__ import annotations

import string
from typing import Any

from .. import constraints
from ..backends.base import Backend, answer_budget, check_constraint, special_tokens
from ..constraints import Constraint
from ..errors import ConstraintUnsupported
from ..tools.forcing import forced_calls
from .deps import blocking
from .errors import ApiError
from .items import bad

TYPES = ("text", "json_object", "json_schema")
#: OpenAI's rule for a schema's name: 1 to 64 ASCII letters, digits, '_' or '-'
MAX_NAME = 64
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_-")


async def chat_constraint(value: Any, backend: Backend, max_tokens: int | None, field: str = "response_format"
                          ) -> Constraint | None:
    """``response_format`` of a chat completion (or a completion): None for ``{"type": "text"}`` or none.
    ``max_tokens``: the answer's budget (None: the context's)."""
    if value is None:
        return None
    kind = _kind(value, field)
    if kind == "text":
        return None
    if kind == "json_object":
        return await _checked(constraints.json_object(), backend, field, field)
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise bad(f"{field}.json_schema", "an object with the schema's name and schema is required")
    return await _from_spec(spec, backend, max_tokens, f"{field}.json_schema", field)


async def text_constraint(text: Any, backend: Backend, max_tokens: int | None
                          ) -> tuple[Constraint | None, dict[str, Any]]:
    """``text.format`` of a Responses request, and the ``format`` the response object echoes (``max_tokens``: its
    ``max_output_tokens``)."""
    fmt = None if text is None else text.get("format")
    if fmt is None:
        return None, {"type": "text"}
    kind = _kind(fmt, "text.format")
    if kind == "text":
        return None, {"type": "text"}
    if kind == "json_object":
        return await _checked(constraints.json_object(), backend, "text.format", "text.format"), {"type": "json_object"}
    constraint = await _from_spec(fmt, backend, max_tokens, "text.format", "text.format", schema_required=True)
    # as OpenAI echoes it: the fields the client sent, description and strict null when it sent none
    echo = {"type": "json_schema", "name": fmt["name"], "schema": fmt["schema"],
            "description": fmt.get("description"), "strict": fmt.get("strict")}
    return constraint, echo


async def tool_constraint(choice: Any, tools: list[dict[str, Any]] | None, template: Any, backend: Backend, *,
                          parallel: bool | None, max_tokens: int | None, response: Constraint | None = None,
                          chat: bool = True) -> Constraint | None:
    """The constraint a forced ``tool_choice`` puts on the answer (already checked against the tools by
    :func:`lmchat.validation.check_tool_choice`): None for ``auto``/``none``. ``'required'``: a call of any
    tool; a named function: a call of it; Responses' ``allowed_tools`` in ``required`` mode: of those listed.
    ``parallel`` (``parallel_tool_calls``, true by default as OpenAI's): one or more calls, else exactly one.
    A chosen tool whose ``parameters`` no call could satisfy within ``max_tokens`` is refused, naming them (Responses'
    ``tools[i].parameters`` where ``chat`` is false)."""
    if not tools or choice in (None, "auto", "none"):
        return None
    names: list[Any] | None = None  # checked against the tools: names of theirs
    if isinstance(choice, dict):
        if choice.get("type") == "allowed_tools":
            if choice.get("mode") != "required":
                return None
            names = [t.get("name") for t in choice.get("tools") or [] if isinstance(t, dict)]
        else:
            names = [(choice.get("function") or {}).get("name") if chat else choice.get("name")]
    if response is not None:
        field = "response_format" if chat else "text.format"
        raise ApiError(400, f"{field}: a forced tool call (tool_choice) is the whole answer: it cannot be "
                            f"structured too", param=field, code="unsupported_value")
    budget = await blocking(answer_budget, backend, max_tokens)
    try:
        constraint = forced_calls(tools, template, names=names, parallel=parallel is not False,
                                  tokens=special_tokens(backend), budget=budget)
    except ConstraintUnsupported as exc:
        if exc.field and exc.field.startswith("tools["):  # a tool's parameters, as the client sent them
            field = exc.field if chat else exc.field.replace(".function.parameters", ".parameters")
            raise bad(field, exc.reason) from None
        raise ApiError(400, f"tool_choice: {exc.reason}", param="tool_choice", code="unsupported_value") from None
    return await _checked(constraint, backend, "tool_choice", "tool_choice")


def _kind(value: Any, field: str) -> str:
    if not isinstance(value, dict):
        raise bad(field, f"an object with a type ({', '.join(TYPES)}), not {type(value).__name__}")
    kind = value.get("type")
    if kind not in TYPES:
        raise bad(f"{field}.type", f"one of {', '.join(TYPES)}, not {kind!r}")
    return str(kind)


async def _from_spec(spec: dict[str, Any], backend: Backend, max_tokens: int | None, field: str, root: str,
                     schema_required: bool = False) -> Constraint:
    """A ``json_schema`` format's ``name``, ``schema``, ``strict``, ``description`` (``field`` their parent)."""
    name = spec.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME or not all(c in NAME_CHARS for c in name):
        raise bad(f"{field}.name", f"a name of 1 to {MAX_NAME} letters, digits, '_' or '-' is required")
    if spec.get("strict") is not None and not isinstance(spec["strict"], bool):
        raise bad(f"{field}.strict", "a boolean")
    if spec.get("description") is not None and not isinstance(spec["description"], str):
        raise bad(f"{field}.description", "a string")
    if "schema" not in spec and not schema_required:
        # any JSON object, as named
        return await _checked(constraints.json_object(), backend, f"{field}.schema", root)
    schema_field = f"{field}.schema"
    budget = await blocking(answer_budget, backend, max_tokens)
    try:
        constraint = constraints.json_schema(spec.get("schema"), name=name, field=schema_field, budget=budget)
    except ConstraintUnsupported as exc:
        raise bad(schema_field, exc.reason) from None
    return await _checked(constraint, backend, schema_field, root)


async def _checked(constraint: Constraint, backend: Backend, schema_field: str, root: str) -> Constraint:
    """``constraint`` if the backend enforces it, else the 400 naming the client's field."""
    try:
        await blocking(check_constraint, backend, constraint)
    except ConstraintUnsupported as exc:
        # the backend names its own fields (schema, grammar, response_format): the client knows its own
        field = schema_field if exc.field in ("schema", "grammar") else root
        raise ApiError(400, f"{field}: {exc.reason}", param=field, code="unsupported_value") from None
    return constraint
