"""Access to the shared conformance corpus and its reference renderer (the oracle).

The corpus lives in ``../shared/conformance`` next to the repository (or where
``LMCHAT_CONFORMANCE`` points); it is never copied into the repository. Its
renderings are committed instead, as golden vectors (``tests/golden``): a clone
without the corpus checks every built-in against them. Tests that need the corpus
itself (the oracle on random conversations, the official template texts, the
vectors' regeneration) are skipped, with the reason, when it is absent.

The seed documents (``../shared/seeds``, or ``LMCHAT_SEEDS``; by default beside
the corpus, so hiding the corpus hides them too) are outside the repository as well.
"""
from __future__ import annotations

import datetime as dt
import functools
import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("LMCHAT_CONFORMANCE") or ROOT.parent / "shared" / "conformance")
AVAILABLE = (CORPUS / "render.py").is_file() and (CORPUS / "templates").is_dir()
SKIP_REASON = f"conformance corpus not found at {CORPUS} (set LMCHAT_CONFORMANCE)"
needs_corpus = pytest.mark.skipif(not AVAILABLE, reason=SKIP_REASON)


def needs_corpus_for(what: str):
    """Skip where the corpus is absent, saying what needs it."""
    return pytest.mark.skipif(not AVAILABLE, reason=f"{what}: {SKIP_REASON}")


needs_oracle_for_random = needs_corpus_for(
    "random conversations are checked against the reference renderer itself (fixed ones: the golden vectors)"
)


SEEDS = Path(os.environ.get("LMCHAT_SEEDS") or CORPUS.parent / "seeds")

DATE = dt.date(2024, 7, 26)


@functools.cache
def module():
    """The oracle module, with template compilation cached (rendering semantics untouched)."""
    if not AVAILABLE:
        pytest.skip(f"needs the reference renderer: {SKIP_REASON}")
    spec = importlib.util.spec_from_file_location("lmchat_conformance_render", CORPUS / "render.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    make_env = mod.make_environment

    @functools.cache
    def cached(now=mod.DEFAULT_DATE):
        env = make_env(now)
        env.from_string = functools.lru_cache(maxsize=None)(env.from_string)
        return env

    mod.make_environment = cached
    return mod


@functools.cache
def template_text(stem: str) -> str:
    if not AVAILABLE:
        pytest.skip(f"needs the official template text {stem}: {SKIP_REASON}")
    with open(CORPUS / "templates" / f"{stem}.jinja", encoding="utf-8", newline="") as f:
        return f.read()


@functools.cache
def special_tokens(stem: str, fallback: tuple = ()) -> dict:
    """bos/eos for a corpus file; 'unknown' values come from the template's own declaration."""
    if not AVAILABLE:
        pytest.skip(f"needs special_tokens.json: {SKIP_REASON}")
    table = json.loads((CORPUS / "special_tokens.json").read_text(encoding="utf-8"))
    entry = table.get(f"{stem}.jinja", {})
    fallback = dict(fallback)
    out = {}
    for key in ("bos_token", "eos_token"):
        value = entry.get(key)
        if value == "unknown":
            value = fallback.get(key)
        if value is not None:
            out[key] = value
    return out


def official_stem(template_cls, tools=None) -> str:
    """The official template transformers renders: the ``tool_use`` one when tools are given and there is one."""
    if tools is not None and template_cls.official_tool_use:
        return template_cls.official_tool_use
    return template_cls.official


def template_tokens(template_cls, tools=None) -> dict:
    """The special tokens the oracle renders ``template_cls``'s official template with."""
    stem = official_stem(template_cls, tools)
    return special_tokens(stem, tuple(sorted(template_cls.hf_special_tokens.items())))


def render(template_cls, messages, *, add_generation_prompt=True, tools=None, date=DATE, **kwargs) -> str:
    """What transformers' apply_chat_template renders for ``template_cls``'s official template (by ``tools``).

    Skips without the corpus; any exception raised here is the official template's.
    """
    stem = official_stem(template_cls, tools)
    mod, text, tokens = module(), template_text(stem), template_tokens(template_cls, tools)
    now = dt.datetime(date.year, date.month, date.day)
    derived = getattr(template_cls, "official_variables", None)  # what a serving stack derives (FireFunction)
    kwargs = {**(derived(tools, date) if derived else {}), **kwargs}
    return mod.render(
        text, messages, add_generation_prompt=add_generation_prompt, tools=tools, special_tokens=tokens, now=now,
        **kwargs,
    )
