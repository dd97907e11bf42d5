"""Values parsed from JSON, before they are checked: the one place these names are defined.

``object``-valued rather than ``Any``: nothing reads such a value without looking at its type first
(``isinstance``), so mypy checks every read; a record whose keys are known is a ``TypedDict`` instead
(serve/wire.py).
"""
from __future__ import annotations

#: a value parsed from JSON, not yet checked (a stored record, a tool's schema, a field a request leaves open)
JSON = object
#: a JSON object not yet checked (its values are looked at one by one)
JSONObject = dict[str, object]
