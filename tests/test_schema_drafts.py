"""A JSON schema of a draft that ignores keywords beside ``$ref`` is refused when it has some: the grammar
compiler reads schemas as draft 2020-12, which applies them (found by ``python -m bench schema_suite`` on
JSON-Schema-Test-Suite's draft7/ref.json: the grammar accepted "a" where the draft-07 validator wants a number)."""
from __future__ import annotations

import jsonschema
import pytest

from lmchat import constraints
from lmchat.errors import ConstraintUnsupported

# draft7/ref.json, "$ref prevents a sibling $id from changing the base uri"
SIBLING_ID = {
    "$schema": "http://json-schema.org/draft-07/schema#", "$id": "http://localhost:1234/sibling_id/base/",
    "definitions": {
        "foo": {"$id": "http://localhost:1234/sibling_id/foo.json", "type": "string"},
        "base_foo": {"$comment": "the base of this schema", "$id": "foo.json", "type": "number"},
    },
    "allOf": [{"$comment": "$ref resolves to the base's foo.json", "$id": "http://localhost:1234/sibling_id/",
               "$ref": "foo.json"}],
}


def test_a_draft_07_ref_with_siblings_is_refused_naming_them():
    assert not jsonschema.Draft7Validator(SIBLING_ID).is_valid("a")  # what the grammar would have let through
    with pytest.raises(ConstraintUnsupported) as refused:
        constraints.json_schema(SIBLING_ID, field="response_format.json_schema.schema")
    assert refused.value.field == "response_format.json_schema.schema" and "$id" in str(refused.value)


@pytest.mark.parametrize("schema", [
    {**SIBLING_ID, "$schema": "https://json-schema.org/draft/2020-12/schema"},  # 2020-12 applies the siblings
    {k: v for k, v in SIBLING_ID.items() if k != "$schema"},  # no draft declared: read as 2020-12
    {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"n": {"type": "number"}},
     "properties": {"x": {"$ref": "#/definitions/n", "$comment": "a comment is no keyword"}}},
])
def test_what_reads_the_same_in_both_drafts_is_taken(schema):
    assert constraints.json_schema(schema).kind == "json_schema"
