"""The stores the tests run on: a real ``redis-server`` on a free loopback port, and each store kind by name.

The fixtures built on them (``redis_server``, ``own_redis``, ``prefix``, ``store``, ``any_store``) are in
tests/conftest.py. ``redis_binary`` skips (with the reason) where the binary is missing; ``.ci/run`` installs
Debian's ``redis-server``. Persistence is an append-only file fsynced on every write, so a server killed and
started again keeps what it acknowledged.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from lmchat.stores import MemoryStore, SQLiteStore

from .serve_helpers import free_port

#: the kinds every store test runs on (``any_store``); "sqlite<3.35": the SQLite store's appends without
#: UPDATE ... RETURNING, as on an older SQLite library
STORES = ["memory", "sqlite", "sqlite<3.35", "redis"]


class RedisServer:
    def __init__(self, folder, binary: str):
        self.folder, self.binary = folder, binary
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:  # ready once it answers PING
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: an outage, not a shutdown (nothing is flushed beyond what was fsynced)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    return binary


def open_kind(kind: str, request, tmp_path):
    """A store of ``kind`` (one of ``STORES``); Redis on the test module's ``redis_server``."""
    if kind == "memory":
        return MemoryStore()
    if kind.startswith("sqlite"):
        if kind == "sqlite<3.35":
            request.getfixturevalue("monkeypatch").setattr("lmchat.stores.sqlite._RETURNING", False)
        return SQLiteStore(tmp_path / "sub" / "sessions.db")
    from lmchat.stores.redis import RedisStore

    return RedisStore(request.getfixturevalue("redis_server").url, prefix=request.getfixturevalue("prefix"))
