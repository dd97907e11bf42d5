"""How short an answer a JSON schema allows: a lower bound on the characters of any JSON text that validates.

The grammar compiler accepts schemas whose language is empty (``{"$ref": "#"}``, two definitions naming each
other, an object whose required member is of its own kind) or whose shortest text is far longer than an answer
can be (``"pattern": "^(a{1000}){1000}$"``): the model then writes nothing or the start of a value, and the turn
ends as if it had answered. Both are refused before the turn, from this bound.

Each subschema's bound is computed from those of the subschemas it uses (a reference, ``allOf``: the largest;
``anyOf``, ``oneOf``, ``type`` and ``enum`` alternatives: the smallest; an object's required members and an
array's ``minItems`` items: their sum, with the brackets and separators), as the shortest derivation of a grammar
is: every bound starts infinite and only comes down, round after round, until no bound moves. One that is still
infinite then has no text at all: no finite derivation reaches it, which is what a schema referring to itself
with no way out is. Keywords not read here bound nothing, so the bound is never more than the truth; it reads the
draft-2020-12 meaning of the keywords, as the grammar compiler does.
"""
from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable

from .jsontypes import JSON, JSONObject
from .schema_refs import children, pointer_of, resolve

#: the bound of a schema no JSON text validates against
NEVER = math.inf
#: rounds of the fixed point after which the bound is given up (0: a bound that says nothing). A schema whose
#: definitions do not refer to each other settles in two; each loop of references it has can add a few.
ROUNDS = 64
#: the shortest JSON text of each type (``0``, ``null``, ``true``)
SHORTEST = {"null": 4, "boolean": 4, "integer": 1, "number": 1, "string": 2, "array": 2, "object": 2}

#: a subschema's current bound
Bound = Callable[[JSON], float]


def shortest(schema: JSON) -> float:
    """The fewest characters a JSON text valid against ``schema`` has (written with no whitespace): :data:`NEVER`
    when no text is valid, 0 when the bound could not be settled within :data:`ROUNDS` rounds."""
    nodes = _reachable(schema)
    bound: dict[int, float] = {id(node): NEVER for node in nodes}
    for _ in range(ROUNDS):
        moved = False
        for node in nodes:
            value = _bound(node, schema, bound)
            if value < bound[id(node)]:
                bound[id(node)], moved = value, True
        if not moved:
            return bound[id(schema)]
    return 0


def _reachable(root: JSON) -> list[JSON]:
    """Every subschema of ``root`` its bound reads, those each one uses before it where they do not loop."""
    order: list[JSON] = []
    seen: set[int] = set()
    stack: list[tuple[JSON, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        target = _target(node, root)
        used = [*children(node), *([] if target is None else [target])]
        stack.extend((sub, False) for sub in reversed(used) if id(sub) not in seen)
    return order


def _target(node: JSON, root: JSON) -> JSON:
    """The schema a local ``$ref`` of ``node`` names, or None (none, or one that resolves nowhere)."""
    if not isinstance(node, dict):
        return None
    pointer = pointer_of(node.get("$ref"))
    if pointer is None:
        return None
    try:
        return resolve(root, pointer)
    except KeyError:
        return None


def _bound(node: JSON, root: JSON, bound: dict[int, float]) -> float:
    """``node``'s bound from the current bounds of the subschemas it uses."""
    if node is True:
        return 1
    if node is False:
        return NEVER
    if not isinstance(node, dict):
        return 0  # no schema: the grammar compiler refuses it, with a better message

    def of(sub: JSON) -> float:
        return bound.get(id(sub), 0)

    parts = [_by_type(node, of)]
    target = _target(node, root)
    if target is not None:
        parts.append(of(target))
    every = node.get("allOf")
    if isinstance(every, list):
        parts += [of(sub) for sub in every]
    for key in ("anyOf", "oneOf"):
        some = node.get(key)
        if isinstance(some, list) and some:
            parts.append(min(of(sub) for sub in some))
    enum = node.get("enum")
    if isinstance(enum, list):
        parts.append(min((_written(v) for v in enum), default=NEVER))
    if "const" in node:
        parts.append(_written(node["const"]))
    return max(parts)


def _written(value: JSON) -> int:
    """The fewest characters ``value`` is written in: as JSON with no whitespace, each number one character (a
    number equals others written shorter: ``-2.0`` is ``-2``, ``100000`` is ``1e5``)."""
    if isinstance(value, dict):
        return 1 + sum(_written(key) + 1 + _written(item) + 1 for key, item in value.items()) + (not value)
    if isinstance(value, list):
        return 1 + sum(_written(item) + 1 for item in value) + (not value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return 1
    return len(json.dumps(value, ensure_ascii=False))


def _by_type(node: JSONObject, of: Bound) -> float:
    """The bound ``type`` and the keywords of each type give: the smallest of the types allowed."""
    declared = node.get("type")
    types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else list(SHORTEST)
    bounds = [_of_type(t, node, of) for t in types if isinstance(t, str)]
    return min(bounds, default=0)


def _count(value: JSON) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _of_type(kind: str, node: JSONObject, of: Bound) -> float:
    if kind == "string":
        return 2 + max(_count(node.get("minLength")), _pattern_width(node.get("pattern")))
    if kind == "array":
        return _array(node, of)
    if kind == "object":
        return _object(node, of)
    return SHORTEST.get(kind, 0)


def _array(node: JSONObject, of: Bound) -> float:
    """Brackets, then ``minItems`` items, each of the schema its position has, and the commas between."""
    n = _count(node.get("minItems"))
    if "prefixItems" in node:  # 2020-12
        prefix, rest = node["prefixItems"], node.get("items", True)
    elif isinstance(node.get("items"), list):  # earlier drafts: a list of items, then additionalItems
        prefix, rest = node["items"], node.get("additionalItems", True)
    else:
        prefix, rest = [], node.get("items", True)
    prefix = prefix if isinstance(prefix, list) else []
    total = 2 + max(n - 1, 0) + sum(of(item) for item in prefix[:n])
    if n > len(prefix):
        total += (n - len(prefix)) * (1 if rest is True else of(rest))
    if "contains" in node and node.get("minContains") != 0:
        total = max(total, 2 + of(node["contains"]))
    return total


def _object(node: JSONObject, of: Bound) -> float:
    """Braces, then each required member (its name, a colon, a value of its schema), and the commas between."""
    required = node.get("required")
    names = list(dict.fromkeys(r for r in required if isinstance(r, str))) if isinstance(required, list) else []
    declared = node.get("properties")
    properties: JSONObject = declared if isinstance(declared, dict) else {}
    other = node.get("additionalProperties", True)
    total: float = 2 + max(len(names) - 1, 0)
    for name in names:
        value: float
        if name in properties:
            value = of(properties[name])
        elif node.get("patternProperties"):
            value = 1  # which patterns match is not worked out here: any value
        else:
            value = 1 if other is True else of(other)
        total += _written(name) + 1 + value
    return total


def _pattern_width(pattern: JSON) -> int:
    """The fewest characters ``pattern`` matches, read by Python's own regex parser (a pattern it does not read,
    an ECMA-262 form such as ``\\p{L}``, bounds nothing)."""
    if not isinstance(pattern, str):
        return 0
    try:
        # the stdlib's parser (re._parser, private) is the one reader of regex syntax at hand: its minimum width
        # is what re compiles with
        parser = importlib.import_module("re._parser")
        low: int = parser.parse(pattern).getwidth()[0]
    except Exception:  # any error of a parser this module does not own: no bound
        return 0
    return low
