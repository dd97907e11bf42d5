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
from typing import Literal

import attrs

from .. import constraints
from ..backends.base import Backend, answer_budget, check_constraint, special_tokens
from ..constraints import Constraint
from ..errors import ConstraintUnsupported
from ..jsontypes import JSON, JSONObject
from ..templates.base import BaseTemplate
from ..tools.forcing import forced_calls
from .deps import blocking
from .errors import ApiError
from .items import bad
from .wire import Tools

TYPES = ("text", "json_object", "json_schema")
#: OpenAI's rule for a schema's name: 1 to 64 ASCII letters, digits, '_' or '-'
MAX_NAME = 64
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_-")


@attrs.frozen
class JsonSchemaFormat:
    """A ``json_schema`` format's fields, checked (OpenAI's ``ResponseFormatJSONSchema.json_schema``, flat in
    ``text.format``: ``ResponseFormatTextJSONSchemaConfig``)."""

    name: str
    schema: JSON
    description: str | None
    strict: bool | None
    any_object: bool = False  # chat's json_schema without a schema: any JSON object, as named


@attrs.frozen
class Format:
    """``response_format`` or ``text.format``, checked: its ``type`` and, for ``json_schema``, its fields."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @classmethod
    def read(cls, value: JSON, field: str, *, flat: bool = False) -> Format:
        """The format the client sent as ``field``; ``flat``: Responses' ``text.format``, which holds the schema's
        fields itself (a schema required) where chat's ``response_format`` has them under ``json_schema``."""
        if not isinstance(value, dict):
            raise bad(field, f"an object with a type ({', '.join(TYPES)}), not {type(value).__name__}")
        kind = value.get("type")
        if kind == "text" or kind == "json_object":
            return cls("text" if kind == "text" else "json_object")
        if kind != "json_schema":
            raise bad(f"{field}.type", f"one of {', '.join(TYPES)}, not {kind!r}")
        spec = value if flat else value.get("json_schema")
        if not isinstance(spec, dict):
            raise bad(f"{field}.json_schema", "an object with the schema's name and schema is required")
        where = field if flat else f"{field}.json_schema"
        name, strict, description = spec.get("name"), spec.get("strict"), spec.get("description")
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME or not all(c in NAME_CHARS for c in name):
            raise bad(f"{where}.name", f"a name of 1 to {MAX_NAME} letters, digits, '_' or '-' is required")
        if strict is not None and not isinstance(strict, bool):
            raise bad(f"{where}.strict", "a boolean")
        if description is not None and not isinstance(description, str):
            raise bad(f"{where}.description", "a string")
        # a missing schema: any JSON object (chat); text.format's is refused as the compiler refuses None
        return cls("json_schema", JsonSchemaFormat(name, spec.get("schema"), description, strict,
                                                   any_object=not flat and "schema" not in spec))

    def echo(self) -> JSONObject:
        """As a response object echoes ``text.format`` (OpenAI's: description and strict null when not sent)."""
        spec = self.json_schema
        if spec is None:
            return {"type": self.type}
        return {"type": "json_schema", "name": spec.name, "schema": spec.schema, "description": spec.description,
                "strict": spec.strict}


async def chat_constraint(value: JSONObject | None, backend: Backend, max_tokens: int | None,
                          field: str = "response_format") -> Constraint | None:
    """``response_format`` of a chat completion (or a completion): None for ``{"type": "text"}`` or none.
    ``max_tokens``: the answer's budget (None: the context's)."""
    if value is None:
        return None
    return await _constraint(Format.read(value, field), backend, max_tokens, field, f"{field}.json_schema")


async def text_constraint(text: JSONObject | None, backend: Backend, max_tokens: int | None
                          ) -> tuple[Constraint | None, JSONObject]:
    """``text.format`` of a Responses request, and the ``format`` the response object echoes (``max_tokens``: its
    ``max_output_tokens``)."""
    value = None if text is None else text.get("format")
    if value is None:
        return None, {"type": "text"}
    fmt = Format.read(value, "text.format", flat=True)
    return await _constraint(fmt, backend, max_tokens, "text.format", "text.format"), fmt.echo()


async def _constraint(fmt: Format, backend: Backend, max_tokens: int | None, root: str, field: str
                      ) -> Constraint | None:
    """The constraint of a checked format (``field``: the json_schema's place, ``root``: the format's)."""
    spec = fmt.json_schema
    if fmt.type == "text":
        return None
    if spec is None:  # json_object
        return await _checked(constraints.json_object(), backend, root, root)
    schema_field = f"{field}.schema"
    if spec.any_object:
        return await _checked(constraints.json_object(), backend, schema_field, root)  # any JSON object, as named
    budget = await blocking(answer_budget, backend, max_tokens)
    try:
        constraint = constraints.json_schema(spec.schema, name=spec.name, field=schema_field, budget=budget)
    except ConstraintUnsupported as exc:
        raise bad(schema_field, exc.reason) from None
    return await _checked(constraint, backend, schema_field, root)


async def tool_constraint(choice: str | JSONObject | None, tools: Tools | None, template: str | BaseTemplate,
                          backend: Backend, *,
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
    names: list[str] | None = None  # checked against the tools (check_tool_choice): names of theirs
    if isinstance(choice, dict):
        if choice.get("type") == "allowed_tools":
            if choice.get("mode") != "required":
                return None
            listed = choice.get("tools")
            names = _names(listed if isinstance(listed, list) else [])
        else:
            names = _names([choice.get("function") if chat else choice])
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


def _names(tools: list[object]) -> list[str]:
    """The names of the tools (objects) a ``tool_choice`` lists."""
    return [name for t in tools if isinstance(t, dict) and isinstance(name := t.get("name"), str)]


async def _checked(constraint: Constraint, backend: Backend, schema_field: str, root: str) -> Constraint:
    """``constraint`` if the backend enforces it, else the 400 naming the client's field."""
    try:
        await blocking(check_constraint, backend, constraint)
    except ConstraintUnsupported as exc:
        # the backend names its own fields (schema, grammar, response_format): the client knows its own
        field = schema_field if exc.field in ("schema", "grammar") else root
        raise ApiError(400, f"{field}: {exc.reason}", param=field, code="unsupported_value") from None
    return constraint
