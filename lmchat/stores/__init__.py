"""Session stores: :class:`SQLiteStore` (the REPL's default) and :class:`MemoryStore`.

Both implement :class:`SessionStore`; the server reuses the protocol.
"""
from __future__ import annotations

import os

from .base import VERSION_KEY, SessionInfo, SessionStore
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = ["VERSION_KEY", "MemoryStore", "SQLiteStore", "SessionInfo", "SessionStore", "open_store"]


def open_store(spec: str | os.PathLike) -> SessionStore:
    """``'memory'`` for a store that keeps nothing after exit, else the path of an SQLite file."""
    if os.fspath(spec) == "memory":
        return MemoryStore()
    return SQLiteStore(spec)
