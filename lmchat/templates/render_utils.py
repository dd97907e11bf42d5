"""Small helpers that reproduce how Jinja prints values inside official templates."""
from __future__ import annotations

import json
from typing import Any


def tojson(value: Any, indent: int | None = None) -> str:
    """transformers' ``tojson`` filter: ``json.dumps`` without ASCII or HTML escaping."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


def jstr(value: Any) -> str:
    """What ``{{ value }}`` prints: ``str()`` of it, nothing for a missing value."""
    if value is None:
        return "None"
    return value if isinstance(value, str) else str(value)
