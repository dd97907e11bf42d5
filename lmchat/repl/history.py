"""Where the REPL keeps its files: the user data dir, or ``$LMCHAT_DATA_DIR``.

``history`` holds the input history (prompt_toolkit's FileHistory: every
submitted input, so ↑ recalls it across runs); ``sessions.db`` is the default
session store.
"""
from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "LMCHAT_DATA_DIR"


def data_dir() -> Path:
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("lmchat"))


def default_store_path() -> Path:
    return data_dir() / "sessions.db"


def input_history():
    """The persistent input history (the folder is created on first use)."""
    from prompt_toolkit.history import FileHistory

    path = data_dir() / "history"
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileHistory(str(path))
