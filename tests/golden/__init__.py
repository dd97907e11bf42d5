"""Golden test vectors: what the official templates render, committed so that a clone checks exactness.

``vectors.json.gz`` holds, for every built-in template with an official counterpart,
the rendering of the official Hugging Face template (by the conformance corpus'
reference renderer, ``tests/oracle.py``) of every conversation the exactness tests
use, or the error it raised. It holds derived outputs only, never template texts.
Regenerate it with ``python -m tests.golden.generate`` (its docstring says when).

Layout (JSON)::

    {"about": ..., "date": "2024-07-26",
     "conversations": {label: messages},
     "templates": {name: {"official": stem, "special_tokens": {...},
                          "vectors": [[label, options, {"text": str} | {"error": str}], ...]}}}

``options`` are the keyword arguments of ``messages2prompt`` (``add_generation_prompt``
always, ``tools`` unless None, template variables, ``date`` as ISO text unless the
default date).
"""
from __future__ import annotations

import copy
import datetime as dt
import functools
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from lmchat.registry import template_class

from .. import oracle

PATH = Path(__file__).with_name("vectors.json.gz")
REGENERATE = "python -m tests.golden.generate"


class Rejected(Exception):
    """The official template raised on this conversation (the message is its error)."""


def normalize(options: dict[str, Any]) -> dict[str, Any]:
    """Render options as stored: sorted, add_generation_prompt explicit, defaults (tools=None, date) left out."""
    out = {"add_generation_prompt": True, **options}
    if out.get("tools", ...) is None:
        del out["tools"]
    date = out.pop("date", oracle.DATE)
    date = dt.date.fromisoformat(date) if isinstance(date, str) else date
    date = date.date() if isinstance(date, dt.datetime) else date
    if date != oracle.DATE:
        out["date"] = date.isoformat()
    return dict(sorted(out.items()))


def call_options(options: dict[str, Any]) -> dict[str, Any]:
    """Stored options as keyword arguments (the date back to a ``datetime.date``, always given)."""
    options = copy.deepcopy(options)
    options["date"] = dt.date.fromisoformat(options["date"]) if "date" in options else oracle.DATE
    return options


def dumps(value: Any) -> str:
    """Canonical JSON: key order kept (it matters to templates), no whitespace, unicode as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def key(name: str, messages, options: dict[str, Any]) -> str:
    return dumps([name, messages, normalize(options)])


@functools.cache
def load() -> dict:
    with gzip.open(PATH, "rt", encoding="utf-8") as f:
        return json.load(f)


@functools.cache
def index() -> dict[str, dict]:
    """key(name, messages, options) -> outcome, for every committed vector."""
    data = load()
    conversations = data["conversations"]
    return {
        dumps([name, conversations[label], options]): outcome
        for name, entry in data["templates"].items()
        for label, options, outcome in entry["vectors"]
    }


def official_outcome(template_cls, messages, options: dict[str, Any]) -> dict[str, str]:
    """The oracle's rendering as stored: {"text": ...} or {"error": "Type: message"} (needs the corpus)."""
    # outside the try: a missing corpus skips, our own mistakes fail; only the rendering's errors are the template's
    messages, kwargs = copy.deepcopy(messages), call_options(normalize(options))
    tools = kwargs.get("tools")
    oracle.module(), oracle.template_text(oracle.official_stem(template_cls, tools))
    oracle.template_tokens(template_cls, tools)
    try:
        return {"text": oracle.render(template_cls, messages, **kwargs)}
    except Exception as exc:  # the official template raised
        return {"error": f"{type(exc).__name__}: {exc}"}


def expected(name: str, messages, **options) -> str:
    """What the official template of built-in ``name`` renders for a fixed conversation.

    Read from the committed vectors; where the corpus is present the oracle renders it
    too and must agree, so a test cannot pass on a stale or missing vector. Raises
    :class:`Rejected` where the official template raises.
    """
    stored = index().get(key(name, messages, options))
    if stored is None:
        pytest.fail(f"no golden vector for {name} with {messages!r} {normalize(options)!r}: run {REGENERATE}")
    if oracle.AVAILABLE:
        live = official_outcome(template_class(name), messages, options)
        assert live == stored, f"golden vector of {name} is stale (the oracle renders {live!r}): run {REGENERATE}"
    if "error" in stored:
        raise Rejected(stored["error"])
    return stored["text"]
