"""A real ``redis-server`` on a free loopback port, for the Redis store and manager tests.

Skips (with the reason) where the binary is missing; ``.ci/run`` installs
Debian's ``redis-server``. Persistence is an append-only file fsynced on
every write, so a server killed and started again keeps what it acknowledged.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, folder, binary: str):
        self.folder, self.binary = folder, binary
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
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


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """One server for a test module; tests keep apart with their own key prefix (``prefix``)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), redis_binary()).start()
    yield server
    server.kill()


@pytest.fixture
def own_redis(tmp_path):
    """A server of the test's own, which the test may kill and start again."""
    server = RedisServer(tmp_path, redis_binary()).start()
    yield server
    server.kill()


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:8]}:"
