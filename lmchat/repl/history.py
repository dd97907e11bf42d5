"""The REPL's files in the data dir (:mod:`lmchat.paths`).

``history`` holds the input history (prompt_toolkit's FileHistory: every
submitted input, so ↑ recalls it across runs); ``sessions.db`` is the default
session store.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..paths import data_dir

if TYPE_CHECKING:
    from prompt_toolkit.history import FileHistory


def default_store_path() -> Path:
    return data_dir() / "sessions.db"


def input_history() -> FileHistory:
    """The persistent input history (the folder is created on first use)."""
    from prompt_toolkit.history import FileHistory

    path = data_dir() / "history"
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileHistory(str(path))
