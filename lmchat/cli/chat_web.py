"""``lmchat chat --web``: the engine ``lmchat chat`` would run, served by ``lmchat serve`` with its web chat page
opened in the browser (docs/web.md)."""
from __future__ import annotations

import argparse

from .main import UsageError

#: chat's own options that mean nothing to the page: a one-shot, a REPL session to resume, its store file (the
#: server keeps the page's chats in its own store, one per engine)
TERMINAL_ONLY = ("prompt", "save", "resume", "system", "format", "store")


def serve_args(chat: argparse.Namespace) -> argparse.Namespace:
    """``lmchat serve --open --port PORT``'s arguments, with each engine, template and sampling option ``chat``
    was given (those both commands have, where chat's value is not its default)."""
    from .main import build_parser

    given = [name for name in TERMINAL_ONLY if getattr(chat, name, None) not in (None, False)]
    if given:
        option = "PROMPT" if given[0] == "prompt" else f"--{given[0]}"
        raise UsageError(f"--web opens the page instead of the terminal: {option} has no meaning there")
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    defaults = vars(commands["chat"].parse_args([]))
    served: argparse.Namespace = commands["serve"].parse_args(["--open", "--port", str(chat.port)])
    for name, value in vars(chat).items():
        if name.startswith("_") or name in ("web", "port") or not hasattr(served, name):
            continue
        if value != defaults.get(name):
            setattr(served, name, value)
    return served


def run(chat: argparse.Namespace) -> int:
    from . import serve_cmd

    return serve_cmd.run(serve_args(chat))
