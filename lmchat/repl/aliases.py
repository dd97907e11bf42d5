"""Ollama's spellings of the REPL's commands, accepted beside lmchat's own: ``/bye``, ``/?``, ``/show info`` and
``/set parameter NAME VALUE`` with Ollama's parameter names (``num_predict``, ``repeat_penalty``...).

A line is rewritten into lmchat's command before it is dispatched, so an alias does exactly what its command does
and the help lists lmchat's names, with these after them.
"""
from __future__ import annotations

import os
import re

from ..backends.base import LocalModel
from .conversation import Conversation

#: Ollama's command -> lmchat's
COMMANDS = {"/bye": "/exit", "/?": "/help"}
#: Ollama's parameter names (its Modelfile's) -> lmchat's /set names; the others are the same in both
PARAMETERS = {"num_predict": "max_new_tokens", "repeat_penalty": "repetition_penalty"}
#: what /help says about them
HELP = ("Ollama's spellings work too: /bye (/exit), /? (/help), /show info, "
        "/set parameter NAME VALUE (num_predict, repeat_penalty, temperature, top_p, top_k, seed, stop)")


def rewrite(line: str) -> str:
    """``line`` in lmchat's own words (unchanged when it is not an alias)."""
    name, space, arg = line.strip().partition(" ")
    if name in COMMANDS:
        return COMMANDS[name] + space + arg
    match = re.fullmatch(r"/set\s+parameter\s+(\S+)(.*)", line.strip(), re.S)
    if match:
        parameter, rest = match.groups()
        return f"/set {PARAMETERS.get(parameter, parameter)}{rest}"
    return line


def info(conv: Conversation) -> str:
    """``/show info``: the model and how this chat runs it (Ollama's shows the model's details)."""
    backend, session = conv.backend, conv.session
    lines = []
    if isinstance(backend, LocalModel):
        lines.append(f"model: {backend.path} ({os.path.getsize(backend.path) / 2**20:.0f} MB)")
        lines.append(f"engine: {backend.name}, {backend.threads} threads")
    else:
        lines.append(f"engine: {backend.name} (no model file in this process)")
    unit = "tokens" if session.counts_tokens else "characters"
    lines.append(f"template: {session.template.name}")
    lines.append(f"context: {session.session_len} {unit}, {session.step} held")
    params = conv.params
    lines.append(f"sampling: temperature {params.temperature}, top_p {params.top_p}, top_k {params.top_k}, "
                 f"repetition_penalty {params.repetition_penalty}, max_new_tokens {params.max_new_tokens} "
                 "(/show params has them all)")
    return "\n".join(lines)
