"""Access to the shared conformance corpus and its reference renderer (the oracle).

The corpus lives in ``../shared/conformance`` next to the repository (or where
``LMCHAT_CONFORMANCE`` points); it is never copied into the repository. Tests
that need it are skipped, with the reason, when it is absent.
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
CORPUS = Path(os.environ.get("LMCHAT_CONFORMANCE", ROOT.parent / "shared" / "conformance"))
AVAILABLE = (CORPUS / "render.py").is_file() and (CORPUS / "templates").is_dir()
SKIP_REASON = f"conformance corpus not found at {CORPUS} (set LMCHAT_CONFORMANCE)"
needs_corpus = pytest.mark.skipif(not AVAILABLE, reason=SKIP_REASON)

DATE = dt.date(2024, 7, 26)


@functools.lru_cache(maxsize=None)
def module():
    """The oracle module, with template compilation cached (rendering semantics untouched)."""
    if not AVAILABLE:
        pytest.skip(SKIP_REASON)
    spec = importlib.util.spec_from_file_location("lmchat_conformance_render", CORPUS / "render.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    make_env = mod.make_environment

    @functools.lru_cache(maxsize=None)
    def cached(now=mod.DEFAULT_DATE):
        env = make_env(now)
        env.from_string = functools.lru_cache(maxsize=None)(env.from_string)
        return env

    mod.make_environment = cached
    return mod


@functools.lru_cache(maxsize=None)
def template_text(stem: str) -> str:
    with open(CORPUS / "templates" / f"{stem}.jinja", encoding="utf-8", newline="") as f:
        return f.read()


@functools.lru_cache(maxsize=None)
def special_tokens(stem: str, fallback: tuple = ()) -> dict:
    """bos/eos for a corpus file; 'unknown' values come from the template's own declaration."""
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


def render(template_cls, messages, *, add_generation_prompt=True, tools=None, date=DATE, **kwargs) -> str:
    """What transformers' apply_chat_template renders for ``template_cls.official``."""
    stem = template_cls.official
    tokens = special_tokens(stem, tuple(sorted(template_cls.hf_special_tokens.items())))
    now = dt.datetime(date.year, date.month, date.day)
    return module().render(
        template_text(stem),
        messages,
        add_generation_prompt=add_generation_prompt,
        tools=tools,
        special_tokens=tokens,
        now=now,
        **kwargs,
    )
