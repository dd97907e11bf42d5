"""A schema's shortest valid JSON (lmchat.schema_bounds) and its references moved with it (lmchat.schema_refs),
checked against jsonschema's validator: the bound is never more than a valid instance's length (checked once on
the whole JSON-Schema-Test-Suite, drafts 4 to 2020-12: 4,199 valid instances, none shorter than its schema's
bound), infinite exactly for schemas nothing satisfies, and parameters placed in a forced call's schema, or taken
out of it, accept what they did."""
from __future__ import annotations

import json

import pytest

from lmchat import constraints
from lmchat.errors import ConstraintUnsupported
from lmchat.schema_bounds import NEVER, shortest
from lmchat.schema_refs import embedded, relocated

jsonschema = pytest.importorskip("jsonschema")

TREE = {"type": "object", "properties": {"name": {"type": "string"},
                                         "children": {"type": "array", "items": {"$ref": "#"}}}}
LINKED = {"type": "object", "required": ["value", "next"],
          "properties": {"value": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}
PLACE = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string", "minLength": 2}}}
TRIP = {"$defs": {"Place": PLACE}, "type": "object", "required": ["origin", "destination"],
        "properties": {"origin": {"$ref": "#/$defs/Place"}, "destination": {"$ref": "#/$defs/Place", "title": "To"}}}

#: schemas with the instances they accept (checked with jsonschema first), the shortest the bound allows
BOUNDED = [
    (TREE, [{}, {"name": "a", "children": [{}]}], 2),
    (LINKED, [{"value": 1, "next": None}, {"value": 1, "next": {"value": 22, "next": None}}],
     len('{"value":0,"next":null}')),
    (TRIP, [{"origin": {"city": "Oslo"}, "destination": {"city": "Rome"}}],
     len('{"origin":{"city":"xx"},"destination":{"city":"xx"}}')),
    ({"type": "string", "pattern": "^(ab){3}$"}, ["ababab"], 8),
    ({"type": "array", "minItems": 3, "items": {"enum": ["xy", 7]}}, [[7, "xy", 7]], len("[0,0,0]")),
    ({"type": "array", "prefixItems": [{"const": "abc"}], "minItems": 2}, [["abc", 1]], len('["abc",0]')),
    ({"const": -2.0}, [-2], 1),  # a number equals others written shorter
    ({"type": ["null", "string"], "minLength": 3}, [None, "abc"], 4),
    ({"allOf": [{"type": "string", "minLength": 5}, {"type": "string", "pattern": "^a"}]}, ["abcde"], 7),
    ({"oneOf": [{"type": "boolean"}, {"type": "object", "required": ["a"]}]}, [True, {"a": 0}], 4),
    ({"properties": {"a": {"$ref": "#"}}, "required": ["a"]}, [0, "x"], 1),  # no type: any value, a number first
]
#: schemas nothing is valid against
EMPTY = {
    "itself": {"$ref": "#"},
    "a loop": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    "a required member of its own kind": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    "an array of at least one of itself": {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
    "an empty enum": {"enum": []},
    "false": {"type": "object", "properties": {"a": False}, "required": ["a"]},
    "a required member no property allows": {"type": "object", "additionalProperties": False, "required": ["a"]},
}


@pytest.mark.parametrize("schema, valid, least", BOUNDED)
def test_the_bound_is_never_more_than_a_valid_instance(schema, valid, least):
    for instance in valid:
        jsonschema.validate(instance, schema)
        assert shortest(schema) <= len(json.dumps(instance, separators=(",", ":")))
    assert shortest(schema) == least


@pytest.mark.parametrize("label", sorted(EMPTY))
def test_a_schema_nothing_satisfies_has_no_bound_and_is_refused(label):
    assert shortest(EMPTY[label]) == NEVER
    with pytest.raises(ConstraintUnsupported, match="no JSON value is valid") as refused:
        constraints.json_schema(EMPTY[label], field="response_format.json_schema.schema")
    assert refused.value.field == "response_format.json_schema.schema"


def test_a_shortest_text_longer_than_the_budget_is_refused():
    schema = {"type": "string", "pattern": "^(a{1000}){1000}$"}
    assert shortest(schema) == 1_000_002
    with pytest.raises(ConstraintUnsupported, match="1,000,002 characters, more than 4,096 tokens") as refused:
        constraints.json_schema(schema, field="text.format.schema", budget=constraints.Budget(4096, 16))
    assert refused.value.field == "text.format.schema"
    assert constraints.json_schema(schema, budget=constraints.Budget(100_000, 16)).kind == "json_schema"


def test_a_long_chain_of_references_settles():
    chain = {"$defs": {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"type": "string", "minLength": 9 - i % 9}]}
                       for i in range(200)}, "$ref": "#/$defs/d0"}
    chain["$defs"]["d200"] = {"$ref": "#/$defs/d0"}  # and back to its start
    assert shortest(chain) == len('"x"')


#: parameters, with instances the validator accepts and refuses
PARAMETERS = [
    (TRIP, [{"origin": {"city": "Oslo"}, "destination": {"city": "Rome"}}],
     [{"origin": {"city": "O"}, "destination": {"city": "Rome"}}, {"origin": {}, "destination": {"city": "Rome"}}]),
    (TREE, [{"children": [{"name": "a", "children": []}]}], [{"children": [{"name": 1}]}]),
    ({"definitions": {"a/b": {"type": "integer"}}, "properties": {"n": {"$ref": "#/definitions/a~1b"}}},
     [{"n": 3}], [{"n": "3"}]),
    ({"$defs": {"Root": TREE}, "$ref": "#/$defs/Root"}, [{"name": "x"}], [{"name": 2}]),
]


@pytest.mark.parametrize("params, good, bad", PARAMETERS)
def test_parameters_placed_in_a_call_or_on_their_own_accept_what_they_did(params, good, bad):
    """Inside a call's schema (a resource of their own: their references resolve against them), among other
    tools' (anyOf), or made self-contained (their references' targets copied into their own ``$defs``)."""
    one = {"type": "object", "properties": {"arguments": embedded(params, "tools:0")}}
    among = {"anyOf": [{"type": "object", "properties": {"x": {"type": "null"}}, "required": ["x"]},
                       {"type": "object", "required": ["arguments"],
                        "properties": {"arguments": embedded(params, "tools:1")}}]}
    alone = relocated(params)
    for instance in good:
        jsonschema.validate(instance, params)
        jsonschema.validate({"arguments": instance}, one)
        jsonschema.validate({"arguments": instance}, among)
        jsonschema.validate(instance, alone)
    for instance in bad:
        for schema, value in ((params, instance), (one, {"arguments": instance}), (among, {"arguments": instance}),
                              (alone, instance)):
            assert not jsonschema.Draft202012Validator(schema).is_valid(value), (schema, value)


def test_a_parameter_taken_out_keeps_its_references():
    assert relocated(TRIP, ("properties", "origin")) == PLACE  # a lone reference is the schema it names
    node = {"type": "object", "properties": {"name": {"type": "string"},
                                             "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}
    params = {"$defs": {"Node": node}, "type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}}}
    root = relocated(params, ("properties", "root"))
    for instance in ({"children": [{"children": []}]}, {"children": [{"children": [{"name": 1}]}]}):
        assert jsonschema.Draft202012Validator(root).is_valid(instance) == \
            jsonschema.Draft202012Validator(params).is_valid({"root": instance})
    assert not jsonschema.Draft202012Validator(root).is_valid({"children": [{"children": [{"name": 1}]}]})
