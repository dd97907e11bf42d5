"""What ``lmchat chat`` and ``lmchat serve`` say at start about what they run: the model file, the threads, the
context and its sessions, where the KV files are and how big; the server adds its store and its address.

A user on a shared machine needs the threads to see why decoding is slow, and the paths to find the model and the
KV files that grow under the data dir (``lmchat cache`` shows and clears those).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends.base import Backend, LocalModel, PrefixCache

if TYPE_CHECKING:
    from ..manager import SessionManager



def model_line(backend: Backend) -> str:
    """``model: PATH (94 MB)``, or what answers when no model file does."""
    if isinstance(backend, LocalModel):
        return f"model: {backend.path} ({_mb(_size(backend.path))})"
    upstream = getattr(backend, "url", None)  # the remote backend's completions URL
    if isinstance(upstream, str):
        return f"model: served by {upstream} ({backend.name} backend)"
    return f"model: none ({backend.name} backend)"


def engine_line(backend: Backend) -> str | None:
    """``4 threads · context 8192 tokens over 4 sessions (2048 each)`` (None: no model runs here)."""
    if not isinstance(backend, LocalModel):
        return None
    per = f" over {backend.sessions} sessions ({backend.ctx // backend.sessions} each)" if backend.sessions > 1 else ""
    return f"{backend.threads} threads (--threads N) · context {backend.ctx} tokens{per}"


def kv_lines(backend: Backend) -> list[str]:
    """Where the engine keeps the KV states it cannot hold: host memory, then files (their directory, how many and
    how big, the bound, how to clear them)."""
    if not isinstance(backend, PrefixCache) or not isinstance(backend, LocalModel):
        return []
    stats = backend.stats()
    lines = [f"KV in host memory: up to {_mb(stats.get('host_budget', 0))} (--kv-host-mb)"]
    if "disk_dir" not in stats:
        return [*lines, "KV files: none kept (--kv-disk-mb 0)"]
    if stats.get("disk_problem"):
        return [*lines, f"KV files: none kept ({stats['disk_problem']})"]
    shared = ", shared with other replicas (--kv-shared)" if stats.get("disk_shared") else ""
    return [*lines, f"KV files: {stats['disk_dir']}{shared}: {count(stats['disk_files'], 'file')}, "
                    f"{_mb(stats['disk_bytes'])} "
                    f"of at most {_mb(stats['disk_budget'])} (--kv-disk-mb; `lmchat cache clear` empties it)"]


def serving_lines(manager: SessionManager, model_name: str, host: str, port: int) -> list[str]:
    """``lmchat serve``'s account of itself, logged before uvicorn's own lines."""
    backend = manager.backend
    template = manager.default_template
    length = manager.session_len
    unit = "tokens" if manager.tokenizer is not None else "characters"
    lines = [f"serving {model_name!r} with the {template.name} template, up to {length} {unit} a session",
             model_line(backend)]
    engine = engine_line(backend)
    if engine:
        lines.append(engine)
    lines.append(f"sessions stored in {manager.store.spec}")
    lines += kv_lines(backend)
    lines.append(f"the web page and the API: {url(host, port)} (docs/server.md)")
    return lines


def url(host: str, port: int) -> str:
    """Where a browser on this machine finds the server (port 0: uvicorn picks one, and says which)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else (
        f"[{host}]" if ":" in host else host)
    if not port:
        return f"http://{shown}:PORT/, PORT the one uvicorn names below"
    return f"http://{shown}:{port}/"


def count(n: int, noun: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _mb(n: float) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 or n == 0 else f"{n / 2**10:.0f} KB"
