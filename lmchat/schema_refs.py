"""A JSON schema's structure: which keywords hold subschemas, and its local references (``"$ref": "#/..."``).

A schema is read where it was written: ``#/$defs/Place`` points into the schema the client sent. A tool's
``parameters`` placed inside a larger schema (a forced call's ``{"name": ..., "arguments": PARAMETERS}``) would
point into that one (:func:`embedded` makes them a resource of their own), and one parameter taken out of them to
be written on its own would point into nothing (:func:`relocated` carries what its references need).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from urllib.parse import unquote

from .jsontypes import JSON, JSONObject

#: keywords whose value is one subschema
ONE = ("additionalProperties", "additionalItems", "unevaluatedProperties", "unevaluatedItems", "contains",
       "propertyNames", "not", "if", "then", "else", "contentSchema")
#: keywords whose value is a list of subschemas (``items`` too, in drafts before 2020-12)
MANY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
#: keywords whose value maps names to subschemas (``dependencies``: a subschema or a list of names)
NAMED = ("properties", "patternProperties", "dependentSchemas", "dependencies")
#: where definitions are kept: reached through references only
DEFINITIONS = ("$defs", "definitions")


def children(schema: JSON) -> Iterator[JSON]:
    """The subschemas directly in ``schema`` (definitions left out: they are reached through references)."""
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key in ONE or (key == "items" and not isinstance(value, list)):
            yield value
        elif key in MANY and isinstance(value, list):
            yield from value
        elif key in NAMED and isinstance(value, dict):
            yield from (sub for sub in value.values() if isinstance(sub, (dict, bool)))


def mapped(schema: JSONObject, change: Callable[[JSON], JSON]) -> JSONObject:
    """A copy of ``schema`` with ``change`` applied to each subschema directly in it, definitions left out."""
    out: JSONObject = {}
    for key, value in schema.items():
        if key in DEFINITIONS:
            continue
        if key in ONE or (key == "items" and not isinstance(value, list)):
            out[key] = change(value)
        elif key in MANY and isinstance(value, list):
            out[key] = [change(sub) for sub in value]
        elif key in NAMED and isinstance(value, dict):
            out[key] = {name: change(sub) if isinstance(sub, (dict, bool)) else sub for name, sub in value.items()}
        else:
            out[key] = value
    return out


def pointer_of(ref: JSON) -> tuple[str, ...] | None:
    """The path a local reference names (``#/$defs/a~1b`` -> ``('$defs', 'a/b')``), or None for any other
    reference (another document, an anchor)."""
    if not isinstance(ref, str) or not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
        return None
    tokens = unquote(ref[1:]).split("/")[1:]
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in tokens)


def resolve(root: JSON, path: Sequence[str | int]) -> JSON:
    """The value at ``path`` in ``root``; KeyError where there is none."""
    node = root
    for token in path:
        if isinstance(node, dict) and str(token) in node:
            node = node[str(token)]
        elif isinstance(node, list) and str(token).isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise KeyError(token)
    return node


def embedded(schema: JSONObject, name: str) -> JSONObject:
    """``schema``, to be placed inside another, as a resource of its own (an ``$id``, ``urn:lmchat:NAME`` unless it
    has one): its local references then resolve against itself, as JSON Schema 2020-12 reads embedded resources
    (llguidance and validators alike), where they would resolve against the schema around it."""
    return schema if "$id" in schema else {"$id": f"urn:lmchat:{name}", **schema}


def relocated(root: JSONObject, path: Sequence[str | int] = ()) -> JSON:
    """The subschema of ``root`` at ``path``, as a schema of its own: each schema its local references reach is
    copied once into a ``$defs`` of the result, under a name of its own, and the reference points to that copy.
    A subschema that is only a reference (and annotations) is the schema it names, so that its keywords
    (``type``) are read at once. References that cannot be resolved are left as written: the grammar's compiler
    names them."""
    names: dict[tuple[str, ...], str] = {}
    pending: list[tuple[str, ...]] = []

    def named(pointer: tuple[str, ...]) -> str:
        if pointer not in names:
            names[pointer] = f"ref{len(names)}"
            pending.append(pointer)
        return "#/$defs/" + names[pointer]

    def copy(node: JSON) -> JSON:
        if not isinstance(node, dict) or "$id" in node:  # a resource of its own: its references are relative to it
            return node
        out = mapped(node, copy)
        pointer = pointer_of(node.get("$ref"))
        if pointer is not None and _resolvable(root, pointer):
            out["$ref"] = named(pointer)
        return out

    top = _dereferenced(root, resolve(root, path))
    result = copy({key: value for key, value in top.items() if key != "$id"} if isinstance(top, dict) else top)
    defs: JSONObject = {}
    while pending:
        pointer = pending.pop()
        defs[names[pointer]] = copy(resolve(root, pointer))
    if defs and isinstance(result, dict):
        result["$defs"] = defs
    return result


#: keywords that annotate a schema and change nothing it accepts
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                         "writeOnly"})


def _dereferenced(root: JSONObject, node: JSON) -> JSON:
    """``node``, or the schema its lone local reference names (followed while there are more; a loop stays)."""
    seen: set[tuple[str, ...]] = set()
    while isinstance(node, dict) and not set(node) - ANNOTATIONS - {"$ref"}:
        pointer = pointer_of(node.get("$ref"))
        if pointer is None or pointer in seen or not _resolvable(root, pointer):
            break
        seen.add(pointer)
        node = resolve(root, pointer)
    return node


def _resolvable(root: JSON, pointer: tuple[str, ...]) -> bool:
    try:
        resolve(root, pointer)
    except KeyError:
        return False
    return True
