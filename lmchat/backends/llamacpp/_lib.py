"""The llama.cpp library through llama-cpp-python's ctypes bindings: import, logging, model loading.

Only the low-level module (``llama_cpp.llama_cpp``) is used; importing it
imports the ``llama_cpp`` package, which installs a log callback that prints
every load message to stderr. :func:`lib` replaces it with one that keeps
warnings and errors (at the ``lmchat.llamacpp`` logger) and drops the rest.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...errors import BackendError
from ...extras import needs
from .allocator import map_large_blocks

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_model_p, llama_model_params

log = logging.getLogger("lmchat.llamacpp")

#: how long (libgomp's spins) llama.cpp's OpenMP threads wait actively for each other before they sleep, unless
#: OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (docs/backends.md, threads)
SPIN_COUNT = "1000"

_LIB: ModuleType | None = None
_LOCK = threading.Lock()
_CALLBACK: Any = None  # the ctypes callbacks must outlive every call into the library
_PROGRESS: Any = None  # (ctypes function pointers: typeshed names their class only privately)
#: what a build with scripts/flash-attn-rowwise.patch says in llama_print_system_info (its kernel's version)
ROWWISE_FEATURE = b"FA_ROWWISE = 2"

#: ggml levels: 1 debug, 2 info, 3 warn, 4 error, 5 continuation. Logged at INFO (silent by default: the
#: REPL owns the terminal); error lines also go into the messages of BackendError
_LEVELS = {3: logging.INFO, 4: logging.INFO}
_last_level = [0]
_errors: deque[str] = deque(maxlen=4)  # the last error lines, for the messages of BackendError


def lib() -> ModuleType:
    """``llama_cpp.llama_cpp``, initialised once (backend, quiet logging).

    Typed as a module, whose attributes mypy reads as Any: llama-cpp-python annotates its functions, but its
    ctypes structures only in part and some wrongly (``llama_batch.pos`` as two-dimensional), so callers
    annotate what they keep of it (pointers, counts) rather than check each call against the bindings."""
    global _LIB, _CALLBACK, _PROGRESS
    with _LOCK:
        if _LIB is None:
            # llama.cpp's CPU threads are OpenMP's, which spin 300,000 times between operations by default: on
            # a CPU other processes share, a spinning thread holds a core another needs, and decode collapsed
            # (0.6 tok/s spinning, 17 sleeping at load 8-11). Sleeping at once (OMP_WAIT_POLICY=PASSIVE) made
            # every wait a wake-up: one-row steps 3x slower on an idle machine. A short spin is as fast as
            # spinning when idle and no slower than sleeping when busy (docs/backends.md, threads). libgomp
            # reads this once, when it loads; what the user set wins
            if "OMP_WAIT_POLICY" not in os.environ:
                os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
            map_large_blocks()  # KV states, tens of MB each, go back to the system when freed
            with needs("the llamacpp backend", "local"):
                import llama_cpp.llama_cpp as L

            def _log(level: int, text: bytes | None, _user: object) -> None:
                level = _last_level[0] if level == 5 else level
                _last_level[0] = level
                if level in _LEVELS and text:
                    line = text.decode("utf-8", "replace").rstrip()
                    log.log(_LEVELS[level], "%s", line)
                    if level == 4 and line:
                        _errors.append(line)

            def _progress(_fraction: float, _user: object) -> bool:  # the default one prints dots on stderr
                return True

            # not decorators: ctypes' CFUNCTYPE classes are untyped, which would make the functions untyped
            _CALLBACK, _PROGRESS = L.llama_log_callback(_log), L.llama_progress_callback(_progress)
            L.llama_log_set(_CALLBACK, ctypes.c_void_p(0))
            L.llama_backend_init()
            _LIB = L
        return _LIB


PrefixCopier = Callable[[Any, int, int, int], int]


def prefix_copier(L: ModuleType) -> PrefixCopier | None:
    """llama.cpp's ``lmchat_memory_seq_cp_prefix(mem, src, dst, p1)`` (scripts/kv-copy-prefix.patch): copies
    the cells of ``src`` below position ``p1`` into the empty ``dst`` and answers how many, or -1 where that
    memory cannot. None in a build without the patch."""
    try:
        copier = L._lib.lmchat_memory_seq_cp_prefix
    except AttributeError:
        return None
    copier.argtypes = (ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)
    copier.restype = ctypes.c_int32
    return copier  # type: ignore[no-any-return]


#: ``n_gpu_layers`` for "every layer": llama.cpp caps it at the model's layers plus the output layer
ALL_LAYERS = 2**31 - 1


def gpu_offload() -> bool:
    """Whether this llama.cpp was built with a backend that can hold layers (CUDA, Metal, Vulkan, ...)."""
    return bool(lib().llama_supports_gpu_offload())


def load_model(path: Path, gpu_layers: int = 0) -> llama_model_p:
    """A ``llama_model *`` for the GGUF at ``path`` (memory-mapped), ``gpu_layers`` of its layers offloaded
    (:data:`ALL_LAYERS`: all of them; 0: CPU only; without :func:`gpu_offload` llama.cpp ignores it)."""
    L = lib()
    params = model_params(L, gpu_layers)
    params.progress_callback = _PROGRESS
    _errors.clear()
    model: llama_model_p | None = L.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise BackendError(f"llama.cpp could not load {path}: {last_error() or 'not a GGUF model file?'}")
    return model


def model_params(L: ModuleType, gpu_layers: int = 0) -> llama_model_params:
    """llama.cpp's default model parameters, ``gpu_layers`` layers offloaded (0: the CPU only), less what
    crashes it (see :func:`amx_active`)."""
    params: llama_model_params = L.llama_model_default_params()
    params.n_gpu_layers = int(gpu_layers)
    return _safe(L, params)


def _safe(L: ModuleType, params: llama_model_params) -> llama_model_params:
    if amx_active(L) and any(name == "use_extra_bufts" for name, *_ in params._fields_):
        params.use_extra_bufts = False
    return params


def amx_active(L: ModuleType) -> bool:
    """Whether llama.cpp's CPU backend was built with Intel AMX and runs on a CPU that has it.

    There it repacks the weights into an "AMX" buffer, and its AMX matrix product then crashes the process
    (SIGSEGV in ``ggml_backend_amx_mul_mat``) on any prompt of more than a few tokens: seen with
    llama-cpp-python 0.3.36 built from source on a Xeon with AMX, in its own ``Llama`` as well as here. The
    plain CPU buffers (``use_extra_bufts`` off) compute the same model with the AVX-512 kernels.
    """
    return b"AMX_INT8 = 1" in L.llama_print_system_info()


def llama_without_amx() -> None:
    """Make llama-cpp-python's own ``Llama`` (and so its server) load models as :func:`model_params` does, in
    this process: the tests and benchmarks compare lmchat with it on the same machine, where its defaults would
    crash (:func:`amx_active`)."""
    import llama_cpp.llama_cpp as L

    default = L.llama_model_default_params
    if not getattr(default, "without_amx", False):
        L.llama_model_default_params = lambda: _safe(L, default())
        L.llama_model_default_params.without_amx = True


def rowwise_flash_attn(L: ModuleType) -> bool:
    """Whether this build computes flash attention one query row at a time (scripts/flash-attn-rowwise.patch,
    which ``scripts/install-engine`` applies): then no row depends on the batch or the threads, and the engine
    turns flash attention on. llama.cpp's own flash attention tiles many rows together and splits a long context
    over the threads for one row, which changes the last bits of a step's results (docs/backends.md). The value is
    the kernel's version: another computes other bits, so it names another build (KV files, probe cache)."""
    return ROWWISE_FEATURE in L.llama_print_system_info()


def last_error() -> str:
    """The last error lines llama.cpp logged (empty if none)."""
    return "; ".join(_errors)


def meta(model: llama_model_p, key: str) -> str | None:
    """A GGUF metadata value as text (None when absent)."""
    L = lib()
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        n = L.llama_model_meta_val_str(model, key.encode(), buf, size)
        if n < 0:
            return None
        if n < size:
            return buf.value.decode("utf-8", "replace")
        size = n + 1
