"""How much context the REPL's one session gets, and what it says when a turn does not fit.

``lmchat chat`` runs one conversation, so on the llamacpp backend it asks for one resident
sequence holding the whole context: the model's trained length (read from the GGUF header,
without loading the model), bounded so that its KV cache takes at most half the memory
available. ``lmchat serve`` keeps its own defaults (several sessions sharing the context).

When a turn does not fit, the REPL's default overflow policy (``shift``) drops the oldest
exchanges from what the model sees, keeping the system prompt, until ``overflow_room`` of the
context is free, and says so; the conversation keeps them. ``/set overflow error`` asks instead. Every
message about a full context ends with what the user can do about it.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from ..errors import LmchatError, SessionLengthExceeded
from ..interop.gguf_meta import read_gguf_metadata

#: the REPL's overflow policy unless ``/set overflow`` says otherwise (Ollama and llama-server shift too)
DEFAULT_OVERFLOW = "shift"
#: never less than the backend's own default per sequence (small machines still get that much)
FLOOR = 4096
#: the KV cache may take this share of the memory available when the REPL starts
MEMORY_SHARE = 0.5
#: f16 keys and values: llama.cpp's default cache type
KV_BYTES = 2


@attrs.frozen
class ContextChoice:
    """The context the REPL asks the engine for, and the sentence that says why (shown at start)."""

    tokens: int
    why: str


def choose_context(model: Path, available: int | None = None) -> ContextChoice | None:
    """The whole context for one session of the GGUF at ``model`` (None when its header says too little)."""
    try:
        info = gguf_fields(model)
    except (OSError, ValueError):  # GGUFError is a ValueError
        return None  # llama.cpp will say what is wrong with the file
    train, per_token = info.get("context_length"), kv_bytes_per_token(info)
    if not isinstance(train, int) or train <= 0:
        return None
    available = memory_available() if available is None else available
    if per_token and available and train * per_token > MEMORY_SHARE * available:
        bound = max(min(FLOOR, train), int(MEMORY_SHARE * available / per_token) // 256 * 256)
        if bound < train:
            return ContextChoice(bound, f"the model was trained on {train}, whose KV cache would take "
                                        f"{_gib(train * per_token)} of the {_gib(available)} of memory available")
    return ContextChoice(train, "the model's trained length")


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def memory_available() -> int | None:
    """Bytes of memory available now (Linux: MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def kv_bytes_per_token(info: Mapping[str, object]) -> int | None:
    """What one token of context costs in the KV cache (all layers, keys and values), or None if unknown."""
    layers, embd = info.get("block_count"), info.get("embedding_length")
    heads = _per_layer(info.get("attention.head_count"))
    kv_heads = _per_layer(info.get("attention.head_count_kv", heads))
    if not (isinstance(layers, int) and layers > 0 and isinstance(embd, int) and embd > 0) or not heads \
            or kv_heads is None:
        return None
    head_dim = embd // (heads if isinstance(heads, int) else max(heads))
    k_dim, v_dim = info.get("attention.key_length", head_dim), info.get("attention.value_length", head_dim)
    if not (isinstance(k_dim, int) and isinstance(v_dim, int)):
        return None
    per_layer = kv_heads if isinstance(kv_heads, list) else [kv_heads] * layers  # an array: one value a layer
    return sum(h * (k_dim + v_dim) for h in per_layer) * KV_BYTES


def _per_layer(value: object) -> int | list[int] | None:
    """A GGUF header's count: a number, or a list of one a layer (None: neither)."""
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)] if all(isinstance(v, int) for v in value) else None
    return value if isinstance(value, int) else None


# ------------------------------------------------------------------ the GGUF header
_WANTED = ("context_length", "block_count", "embedding_length", "attention.head_count",
           "attention.head_count_kv", "attention.key_length", "attention.value_length")


def gguf_fields(path: Path) -> dict[str, object]:
    """The architecture's size fields of a GGUF file (``context_length``, ``block_count``...), from its
    header only (:mod:`lmchat.interop.gguf_meta`: the reading stops once they are seen)."""
    arch = read_gguf_metadata(path, ["general.architecture"]).get("general.architecture")
    if not isinstance(arch, str):
        return {}
    found = read_gguf_metadata(path, [f"{arch}.{key}" for key in _WANTED])
    return {key[len(arch) + 1:]: value for key, value in found.items()}


# ------------------------------------------------------------------ when a turn does not fit
class ContextFull(LmchatError, ValueError):
    """A turn does not fit in the session's context; the message says by how much and what to do."""


def advice(exc: SessionLengthExceeded, policy: str) -> str:
    """``exc``'s message and what to do about it, which depends on the overflow policy that raised it."""
    if policy == "error":
        todo = ("/set overflow shift drops the oldest turns to make room (the system prompt stays), "
                "/reset starts over")
    else:  # even with every earlier turn dropped the new message and its answer do not fit
        todo = "the message and its answer alone do not fit: send a shorter one"
    todo += (f", /set max_new_tokens below {exc.max_new_tokens} leaves less room for the answer"
             if exc.max_new_tokens else "")
    if exc.unit == "tokens":
        todo += ", or restart with a larger context (lmchat chat --resume --ctx TOKENS)"
    return f"{exc}: {todo}"


def dropped_notice(count: int, limit: int, unit: str, room: float) -> str:
    """What the REPL prints when the overflow policy dropped messages to fit the turn."""
    return (f"[context full ({limit} {unit}): the model no longer sees the {count} oldest messages (the system "
            f"prompt stays), so that {room:.0%} of it is free for the next turns; the conversation keeps them "
            "(/save, --resume); /set overflow_room, /set overflow error asks instead]")
