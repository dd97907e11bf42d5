"""Session stores: :class:`SQLiteStore` (the REPL's and the server's default), :class:`MemoryStore` and
``lmchat.stores.redis.RedisStore`` (replicas sharing sessions; needs the ``redis`` extra).

All implement :class:`SessionStore` with the same semantics: append-only records (a base snapshot and
one patch per turn, folded into a new base when they outgrow it) and compare-and-set on the version.
"""
from __future__ import annotations

import os
from typing import Any

from ..errors import StoreError
from ..extras import load
from .base import VERSION_KEY, AsyncStore, Expiring, SessionInfo, SessionStore, Summary, version_of
from .memory import MemoryStore
from .records import RecordInfo
from .sqlite import SQLiteStore

__all__ = ["VERSION_KEY", "AsyncStore", "Expiring", "MemoryStore", "RecordInfo", "SQLiteStore", "SessionInfo",
           "SessionStore", "Summary", "version_of", "open_store"]

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


# Any: RedisStore's keyword arguments (ttl, prefix, socket_timeout...), which it checks
def open_store(spec: str | os.PathLike[str], **options: Any) -> SessionStore:
    """A store from its spec: ``'memory'`` (nothing kept after exit), ``redis://HOST:PORT/DB`` (also
    ``rediss://``, ``unix://``; ``options`` go to :class:`RedisStore`), ``sqlite:PATH`` or a plain path
    (an SQLite file)."""
    spec = os.fspath(spec)
    if options and not spec.startswith(REDIS_SCHEMES):
        raise StoreError(f"{spec}: options {sorted(options)} apply to Redis stores only")
    if spec == "memory":
        return MemoryStore()
    if spec.startswith(REDIS_SCHEMES):
        store: SessionStore = load("lmchat.stores.redis:RedisStore", "the Redis store", "redis")(spec, **options)
        return store
    if spec.startswith("sqlite:"):
        path = spec[len("sqlite:"):]
        # sqlite:///abs/path.db (URL style) and sqlite:relative.db both name a file
        return SQLiteStore(path[2:] if path.startswith("//") else path)
    return SQLiteStore(spec)
