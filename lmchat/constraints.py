"""What an answer must be: JSON, JSON that validates against a schema, or a GBNF grammar.

A :class:`Constraint` rides on :class:`~lmchat.backends.SamplingParams` and only masks sampling: the
prompt, the session and the KV cache are those of the same turn without it. A backend enforces it
(the llama.cpp engine with llguidance, see :mod:`lmchat.backends.llamacpp.grammars`) or refuses it with
:class:`~lmchat.errors.ConstraintUnsupported` before anything is generated or stored.
"""
from __future__ import annotations

import json
from typing import Literal

import attrs

from .errors import ConstraintUnsupported
from .jsontypes import JSON, JSONObject
from .schema_bounds import NEVER, shortest

#: the largest schema accepted, in characters of its JSON text (a bound on the work of compiling it)
MAX_SCHEMA_CHARS = 100_000


@attrs.frozen(kw_only=True)
class Constraint:
    """``kind``: ``'json_object'`` (any JSON object), ``'json_schema'`` (``schema``, its canonical JSON text)
    or ``'gbnf'`` (``grammar``, llama.cpp's grammar format, its start rule ``root``); ``name``: the schema's
    name, for messages.

    ``after``: where the constrained part starts, the literal marker that ends a reasoning block (``</think>``):
    the text up to it is free, then whitespace, then the constrained answer. Empty: the whole answer is
    constrained. ``opens``: the marker that opens the block (``<think>``) when the generation prompt left none
    open: the block is then optional, the model may answer at once. ``after_max_tokens``: a budget for the
    free part: past it the marker is forced (the bounded part ends at the marker's first character too, see
    :func:`lmchat.backends.llamacpp.grammars.lark_of`).

    ``lead``: instead of ``after``, what comes before the answer as a Lark grammar (its rule ``lead`` and the
    rules that one uses, markers as special tokens where the model has them): gpt-oss' free analysis message
    and its final channel's header (:mod:`lmchat.tools.channel_lead`).

    ``written``: the answer's start, already written (an answer reopened by ``/continue``): the engine advances
    the grammar past it before the first token, so that the answer goes on where it was cut rather than
    starting again."""

    kind: Literal["json_object", "json_schema", "gbnf", "lark"]
    schema: str | None = None
    grammar: str | None = None
    name: str = ""
    after: str = ""
    opens: str = ""
    after_max_tokens: int | None = None
    lead: str = ""
    written: str = ""

    def schema_dict(self) -> JSONObject | None:
        return None if self.schema is None else json.loads(self.schema)


def after_reasoning(constraint: Constraint, close: str, *, opens: str = "",
                    max_tokens: int | None = None) -> Constraint:
    """``constraint`` starting after a reasoning block that ``close`` ends (``opens``: see :class:`Constraint`)."""
    if not close:
        raise ConstraintUnsupported("the marker that ends the reasoning is empty", field="after")
    if max_tokens is not None and max_tokens < 1:
        raise ConstraintUnsupported("the reasoning budget is at least one token", field="after_max_tokens")
    return attrs.evolve(constraint, after=close, opens=opens, after_max_tokens=max_tokens)


def continued(constraint: Constraint, written: str) -> Constraint:
    """``constraint`` for an answer reopened after ``written``, its text so far (``/continue``). With text
    written, any reasoning is over: the answer's own grammar goes on from that text. With none (the answer was
    cut inside its reasoning), the reasoning block is open already."""
    if written:
        return attrs.evolve(constraint, after="", opens="", after_max_tokens=None, lead="", written=written)
    return attrs.evolve(constraint, opens="")


def json_object() -> Constraint:
    """Any JSON object."""
    return Constraint(kind="json_object")


@attrs.frozen
class Budget:
    """How much an answer can write: ``tokens`` (its ``max_tokens``, else the context), each at most
    ``token_bytes`` bytes (the vocabulary's longest token)."""

    tokens: int
    token_bytes: int


def json_schema(schema: JSON, *, name: str = "", field: str = "schema", budget: Budget | None = None) -> Constraint:
    """JSON that validates against ``schema`` (a JSON Schema object). ``field`` names the request field in
    errors; ``budget``: what the answer can write, which the schema's shortest text must fit in."""
    if not isinstance(schema, dict):
        raise ConstraintUnsupported(f"a JSON schema is an object, not {type(schema).__name__}", field=field)
    try:
        # key order kept: properties are written in the order the schema lists them
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConstraintUnsupported(f"the schema is not JSON: {exc}", field=field) from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise ConstraintUnsupported(f"the schema is {len(text):,} characters long, over {MAX_SCHEMA_CHARS:,}",
                                    field=field)
    _check_draft(schema, field)
    check_writable(schema, field, budget)
    return Constraint(kind="json_schema", schema=text, name=name)


def check_writable(schema: JSON, field: str, budget: Budget | None = None) -> None:
    """Refuse, naming ``field``, a schema no JSON text is valid against (the grammar would let the model write
    nothing, or the start of a value for ever, and the turn would end as if answered), or whose shortest valid
    text is longer than ``budget`` can write (:func:`lmchat.schema_bounds.shortest`)."""
    bound = shortest(schema)
    if bound == NEVER:
        raise ConstraintUnsupported(
            "no JSON value is valid against this schema (a reference that leads back to itself with no other way, "
            "a required member of the object's own kind, an empty enum, false...): no answer could be written",
            field=field)
    if budget is not None and bound > budget.tokens * budget.token_bytes:
        raise ConstraintUnsupported(
            f"the shortest JSON valid against this schema is {int(bound):,} characters, more than {budget.tokens:,} "
            f"tokens can write (at most {budget.token_bytes} bytes each): raise max_tokens or loosen the schema",
            field=field)


#: drafts in which every keyword beside ``$ref`` is ignored (2019-09 and later apply them)
REF_ALONE_DRAFTS = ("draft-04", "draft-06", "draft-07")


def _check_draft(schema: JSONObject, field: str) -> None:
    """Refuse what the grammar would read otherwise than the schema's own draft: the grammar compiler reads every
    schema as draft 2020-12, which applies the keywords beside a ``$ref`` that older drafts ignore (with a sibling
    ``$id``, it accepts JSON a draft-07 validator rejects: JSON-Schema-Test-Suite's draft7/ref.json)."""
    declared = schema.get("$schema")
    if not isinstance(declared, str) or not any(draft in declared for draft in REF_ALONE_DRAFTS):
        return
    stack: list[JSON] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "$ref" in node and set(node) - {"$ref", "$comment"}:
                siblings = ", ".join(sorted(set(node) - {"$ref", "$comment"}))
                raise ConstraintUnsupported(
                    f"the schema is {declared}, whose $ref ignores the keywords beside it ({siblings}); the "
                    f"constraint would apply them: move them out of the $ref's object, or declare draft 2020-12",
                    field=field)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def grammar(gbnf: str) -> Constraint:
    """Output of a GBNF grammar (llama.cpp's format, its start rule ``root``; only backends that take GBNF
    enforce it)."""
    if not isinstance(gbnf, str) or not gbnf.strip():
        raise ConstraintUnsupported("a grammar is a non-empty GBNF text", field="grammar")
    return Constraint(kind="gbnf", grammar=gbnf)
