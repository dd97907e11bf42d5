"""Every built-in template against the golden vectors: the official templates' renderings, committed.

This runs everywhere, corpus or not. Where the corpus is, the vectors must also be what
the oracle renders now (``python -m tests.golden.generate`` regenerates them).
"""
from __future__ import annotations

import copy
import json

import pytest

import lmchat
from lmchat.registry import template_class

from . import golden, oracle
from .golden.cases import OWN_TOOL_FORMAT

OFFICIAL = sorted(n for n in lmchat.template_names() if template_class(n).official)



def lmchat_outcome(name, messages, options) -> dict:
    try:
        text = template_class(name)().messages2prompt(copy.deepcopy(messages), **golden.call_options(options))
    except ValueError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"text": text}


def difference(expected: dict, got: dict) -> str | None:
    """Why lmchat's outcome breaks the vector: other text, or no ValueError where the official template raised."""
    if "text" in expected and got != expected:
        return f"expected {expected['text']!r}, got {got}"
    if "error" in expected and "error" not in got:
        return f"the official template raised {expected['error']!r}, lmchat rendered {got['text']!r}"
    return None


def test_every_official_template_has_vectors():
    data = golden.load()
    assert sorted(data["templates"]) == OFFICIAL, f"templates and vectors differ: run {golden.REGENERATE}"
    for name, entry in data["templates"].items():
        assert entry["official"] == template_class(name).official, f"{name}: run {golden.REGENERATE}"
        labels = {label.split("/")[0] for label, _, _ in entry["vectors"]}
        required = {"battery", "random"} | (set() if name in OWN_TOOL_FORMAT else {"random-tools"})
        assert required <= labels, f"{name} lacks vectors of {required - labels}: run {golden.REGENERATE}"


@pytest.mark.parametrize("name", OFFICIAL)
def test_builtin_renders_the_golden_vectors(name):
    """Byte-identical text where the official template rendered; a ValueError where it raised."""
    data = golden.load()
    entry = data["templates"].get(name)
    assert entry is not None, f"no golden vectors for {name}: run {golden.REGENERATE}"
    failures = []
    for label, options, expected in entry["vectors"]:
        problem = difference(expected, lmchat_outcome(name, data["conversations"][label], options))
        failures += [f"{label} {options}: {problem}"] if problem else []
    assert not failures, f"{name} differs from {entry['official']} on {len(failures)} of " \
                         f"{len(entry['vectors'])} vectors:\n" + "\n".join(failures[:10])


@oracle.needs_corpus_for("regenerates the golden vectors with the reference renderer")
def test_vectors_are_what_the_oracle_renders_now():
    from .golden import generate

    current = generate.serialize(generate.build())
    committed = generate.committed()
    if current != committed:
        fresh, old = json.loads(current), json.loads(committed)
        stale = sorted(n for n in fresh["templates"].keys() | old["templates"].keys()
                       if fresh["templates"].get(n) != old["templates"].get(n))
        conversations = fresh["conversations"] != old["conversations"]
        pytest.fail(f"golden vectors are stale (templates {stale}, conversations changed: {conversations}): "
                    f"run {golden.REGENERATE}")



def test_the_hidden_corpus_pass_runs_every_test_file_that_uses_the_corpus():
    """.ci/run's second pass: every file naming the oracle or the golden vectors, nothing unrelated."""
    from .golden.readers import TESTS, readers

    listed = set(readers())
    for path in sorted(TESTS.glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(TESTS.parent))
        if "oracle." in text or "golden." in text or "assert_same" in text:
            assert name in listed, name
    assert "tests/test_golden.py" in listed and "tests/test_embedded.py" not in listed
