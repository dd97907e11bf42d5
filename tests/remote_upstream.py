"""A real OpenAI-compatible inference server for the remote backend's tests and benchmark:
llama-cpp-python's server (``python -m llama_cpp.server``) on the bundled GGUF, in a subprocess.

It tokenizes text prompts with special-token parsing on, refuses a prompt of token ids (its
``/v1/completions`` takes a string or a list of strings), keeps one KV cache that the next request
reuses up to the longest common prefix, and logs that reuse on stderr (``Llama.generate: N
prefix-match hit, remaining M prompt tokens to eval``): the per-turn evidence tests and benchmark read.
"""
from __future__ import annotations

import os
import re
import sys
import time

from .serve_helpers import Service, free_port

READY_SECONDS = 180  # importing the server and mapping the model, on 2 shared cores
#: llama-cpp-python's log line for a prompt that shares a prefix with what its KV cache holds
REUSE = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
#: its log line when it notices that the client went away mid-stream
DISCONNECTED = "Disconnected from client"
#: the extras `python -m llama_cpp.server` imports besides llama_cpp itself
SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")


#: ``python -m llama_cpp.server``, loading its model as lmchat does where its defaults crash (an AMX CPU)
_SERVER = ("import runpy; from lmchat.backends.llamacpp._lib import llama_without_amx; llama_without_amx(); "
           "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")


class Upstream(Service):
    """``python -m llama_cpp.server`` on ``model`` (default: the bundled GGUF); ``url`` once it answers."""

    name = "llama-server"
    ready_path = "/v1/models"
    ready_seconds = READY_SECONDS

    def __init__(self, model: str | None = None, *, n_ctx: int = 2048, threads: int = 1, extra: tuple[str, ...] = ()):
        if model is None:
            from lmchat.backends.bundled import default_gguf

            model = str(default_gguf())
        self.model = model
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-c", _SERVER, "--model", model, "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
                   "--n_threads_batch", str(threads), *extra]
        # one OpenMP thread: llama.cpp's threads spin-wait for each other on a shared machine
        self.start(command, {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"})

    def mark(self) -> int:
        """Where the log ends now: :meth:`since` reads what came after."""
        return len(self.output())

    def since(self, mark: int) -> str:
        return self.output()[mark:]

    def reuse(self, mark: int = 0) -> list[tuple[int, int]]:
        """(tokens reused from the cache, tokens evaluated) of each request since ``mark`` that reused any."""
        return [(int(a), int(b)) for a, b in REUSE.findall(self.since(mark))]

    def wait_for(self, text: str, mark: int, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.since(mark):
                return True
            time.sleep(0.1)
        return False
