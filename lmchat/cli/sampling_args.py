"""The sampling flags ``lmchat chat`` and ``lmchat serve`` share (``--temperature``, ``--top-p``...).

Each is a ``/set`` setting of the REPL, read and checked by :mod:`lmchat.repl.settings`, so a flag and the command
agree on what a value may be. Unset, a value is the template's bundled one (``lmchat templates`` lists them), with
the model's own over it (the bundled model: a repetition penalty, :mod:`lmchat.backends.bundled`); ``--help`` says
what that comes to on the bundled model. llama-server's and Ollama's spellings are accepted too.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

from ..backends.base import SamplingParams
from ..backends.bundled import BUNDLED_SAMPLING
from ..registry import get_template
from ..repl import settings

#: the template the bundled model's GGUF matches (tests/test_cli_flags.py checks it against ``lmchat match``)
BUNDLED_TEMPLATE = "smollm2"

#: (flags, the setting, what it does): lmchat's name first, then llama-server's
FLAGS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("--temperature", "--temp"), "temperature", "sampling temperature, 0: greedy"),
    (("--top-p",), "top_p", "nucleus sampling: keep the likeliest tokens up to this probability"),
    (("--top-k",), "top_k", "keep the K likeliest tokens, 0: off"),
    (("--repetition-penalty", "--repeat-penalty"), "repetition_penalty", "penalty on repeated tokens, 1: off"),
    (("--max-new-tokens", "-n", "--n-predict"), "max_new_tokens", "the most tokens an answer may have"),
)
#: the settings the flags set (their ``dest``)
NAMES = tuple(name for _, name, _ in FLAGS)


def add_sampling_arguments(p: argparse.ArgumentParser, *, answer_budget: str | None = None) -> None:
    """The flags, in a group of their own; ``answer_budget``: ``--max-new-tokens``' help, when it says more."""
    group = p.add_argument_group(
        "sampling (defaults: the template's bundled values, `lmchat templates` lists them; the model's own over "
        "them)")
    for flags, name, what in FLAGS:
        text = answer_budget if name == "max_new_tokens" and answer_budget else what
        group.add_argument(*flags, dest=name, type=_reader(name), metavar=_metavar(name),
                           help=f"{text} (default: {bundled_default(name)})")


def bundled_default(name: str) -> str:
    """What ``name`` is when no flag sets it, in words: on the bundled model, and where it comes from."""
    if name == "max_new_tokens":
        return str(SamplingParams().max_new_tokens)
    value = BUNDLED_SAMPLING.get(name, getattr(get_template(BUNDLED_TEMPLATE), name))
    shown = "off" if value is None else value
    return f"the template's; {shown} on the bundled model ({BUNDLED_TEMPLATE})"


def given(args: argparse.Namespace) -> dict[str, settings.Value]:
    """The sampling values the command line set (checked already)."""
    return {name: getattr(args, name) for name in NAMES if getattr(args, name, None) is not None}


def _reader(name: str) -> Callable[[str], settings.Value]:
    def read(raw: str) -> settings.Value:
        try:
            return settings.parse(name, raw)
        except settings.SettingError:
            raise argparse.ArgumentTypeError(f"expected {settings.SETTINGS[name].rule}, got {raw!r}") from None

    read.__name__ = name  # what argparse names in its own messages
    return read


def _metavar(name: str) -> str:
    return "N" if name in ("top_k", "max_new_tokens") else "X"
