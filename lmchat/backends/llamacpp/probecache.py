"""The start-up probe's answer, kept between processes.

The probe (probe.py) feeds ~300 ids three ways and takes 2.8 of the 3.2 seconds an engine of the bundled
model needs to start on one thread (idle 2-core machine); every ``lmchat chat``, every ``lmchat serve`` and
every replica paid it. Its answer depends only on the arithmetic llama.cpp does: the model's tensors, the
context's shape, the thread count, the build's kernels and the CPU that runs them. So it is measured once
per such *key* and kept in ``<cache dir>/step-probes/`` (``$LMCHAT_CACHE_DIR``, else the user cache dir), a
small JSON file per key named by its digest. The key names the library files by path, size and modification
time: a rebuilt or reinstalled llama-cpp-python (another wheel, ``CMAKE_ARGS=-DGGML_LLAMAFILE=OFF``) is
another key, measured again, even under the same version number.

A kept answer decides whether decoded answers are prefilled again, so a forged one could make answers depend
on batching: each file ends with an HMAC under ``step-probes.key`` beside it (made at the first write, mode
0600, :mod:`.kvkey`). The files are read as the KV files are (:mod:`.kvdir`: no link followed, no FIFO or
device opened, a bounded read); one that is not a regular file, fails its MAC, is of another key or does not
parse is measured again and replaced, and the log says why. A cache that cannot be written costs only the
next start's probe.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import platform
from pathlib import Path
from types import ModuleType

from ...paths import cache_dir
from .kvdir import DirFiles
from .kvformat import KVFileRejected
from .kvkey import KVKeyError, own_key

log = logging.getLogger("lmchat.llamacpp")

#: the most a kept answer may take (a few hundred bytes are written)
MAX_BYTES = 16384
_MAC_BYTES = 32
DIR_NAME = "step-probes"


def probe_key(L: ModuleType, shape: tuple[object, ...]) -> dict[str, object] | None:
    """What the probe's answer depends on: ``shape`` (the model and the context, as the engine describes them),
    the llama.cpp build (its library files and the kernels it reports) and the CPU; None for a build whose
    files cannot be named (its answer is then measured every time, never kept)."""
    import llama_cpp

    # the shared libraries llama-cpp-python loaded (libllama, libggml-cpu...): a private name of its bindings
    lib_name = getattr(getattr(L, "_lib", None), "_name", None)
    if not isinstance(lib_name, str):
        return None
    files = []
    try:
        for path in sorted(Path(lib_name).parent.iterdir()):
            if ".so" in path.name or path.suffix in (".dylib", ".dll"):
                st = path.stat()
                files.append([str(path), st.st_size, st.st_mtime_ns])
    except OSError:
        return None
    return {"shape": [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in shape],
            "llama_cpp": llama_cpp.__version__, "libraries": files,
            "kernels": L.llama_print_system_info().decode("utf-8", "replace").strip(),
            "cpu": [platform.machine(), _cpu_model()]}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


class ProbeCache:
    """The kept answers of one cache directory (None from :func:`open_cache` where it cannot be made)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = DirFiles(root)  # made if missing
        self._key = own_key(root.parent / f"{DIR_NAME}.key")

    def get(self, key: dict[str, object]) -> dict[str, object] | None:
        """The answer kept for ``key`` (None: none, or one not to be trusted; the log says why)."""
        name = _name(key)
        try:
            data = self.files.read(name, MAX_BYTES)
        except KVFileRejected as exc:
            why = f"is larger than an answer ({MAX_BYTES} bytes)" if exc.kind == "too large" else str(exc)
            if exc.kind != "gone":
                log.info("llama.cpp step probe: the kept answer %s %s; measuring again", name, why)
            return None
        body, mac = bytes(data[:-_MAC_BYTES]), bytes(data[-_MAC_BYTES:])
        if len(data) <= _MAC_BYTES or not hmac.compare_digest(mac, self._mac(body)):
            log.info("llama.cpp step probe: the kept answer %s fails its MAC; measuring again", name)
            return None
        try:
            record = json.loads(body)
            if not isinstance(record, dict) or record.get("key") != json.loads(json.dumps(key)):
                raise ValueError("it was measured for another key")
            answer = record["answer"]
            if not isinstance(answer, dict):
                raise TypeError("no answer")
        except (ValueError, KeyError, TypeError) as exc:
            log.info("llama.cpp step probe: the kept answer %s cannot be used (%s); measuring again", name, exc)
            return None
        return answer

    def put(self, key: dict[str, object], answer: dict[str, object]) -> None:
        body = json.dumps({"key": key, "answer": answer}).encode()
        try:
            self.files.write(_name(key), [body, self._mac(body)])
        except OSError as exc:
            log.info("llama.cpp step probe: cannot keep its answer in %s (%s)", self.root, exc.strerror or exc)

    def close(self) -> None:
        self.files.close()

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, "sha256").digest()


def open_cache() -> ProbeCache | None:
    """The cache of this user (``$LMCHAT_CACHE_DIR``...), or None if it cannot be had (the log says why)."""
    root = cache_dir() / DIR_NAME
    try:
        return ProbeCache(root)
    except (OSError, KVKeyError) as exc:
        log.info("llama.cpp step probe: its answers are not kept (%s: %s)", root, exc)
        return None


def _name(key: dict[str, object]) -> str:
    return hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=16).hexdigest() + ".json"
