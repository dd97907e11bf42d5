"""Where lmchat keeps its files: the user data dir, or ``$LMCHAT_DATA_DIR``; and what it can compute again,
in the user cache dir, or ``$LMCHAT_CACHE_DIR``.

The REPL keeps its input ``history``, its sessions (``sessions.db``) and its
``debug.log`` in the data dir; ``lmchat serve`` its default stores (``server-*.db``).
The cache dir holds models converted for the Hugging Face engine (``models/``) and
the llama.cpp engine's start-up probe answers (``step-probes/``).
"""
from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "LMCHAT_DATA_DIR"
CACHE_DIR_ENV = "LMCHAT_CACHE_DIR"


def data_dir() -> Path:
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("lmchat"))


def cache_dir() -> Path:
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("lmchat"))
