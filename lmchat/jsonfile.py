"""JSON files read with errors that say where: the file, the line and the column."""
from __future__ import annotations

import json
import sys

from .errors import ConfigError
from .jsontypes import JSON


def read_json(path: str, error: type[ConfigError] = ConfigError) -> JSON:
    """The content of a JSON file (``-``: standard input); a syntax error is ``error`` naming its place."""
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON: {exc.msg}", source=f"{path}:{exc.lineno}:{exc.colno}") from None
