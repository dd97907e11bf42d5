"""Per-session KV caches of the embedded backend, in an LRU bounded by a memory budget.

A :class:`Slot` is a ``transformers.DynamicCache`` plus the exact ids whose keys
and values it holds. Before a turn the slot is matched against the ids the
session says the engine holds (the cache's ids, its last unfed token and the
delta, or the whole prompt when the counts disagree): the longest common
prefix is kept, the rest is cropped, and only what follows is prefilled. That
one rule covers the ordinary turn (the end marker the model sampled but never
fed, then the delta), answers cut inside a token by a stop string, caches
evicted or dropped (nothing in common: rebuild) and retokenised histories.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

import attrs
import torch
from transformers import DynamicCache, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import CacheLayerMixin, DynamicLayer
from transformers.models.llama.modeling_llama import rotate_half

from ...errors import BackendError, ConfigError

#: architectures whose keys are rotated with ``rotate_half`` over the whole head (Llama's RoPE layout)
ROTATE_HALF_MODELS = ("llama", "mistral", "qwen2", "qwen3")
#: RoPE types whose angle is position * a fixed frequency, so a shift is one more rotation
LINEAR_ROPE = ("default", "linear", "llama3")


@attrs.define(eq=False)
class Slot:
    cache: DynamicCache
    ids: list[int] = attrs.field(factory=list)  # the ids whose keys/values the cache holds, in order
    unfed: list[int] = attrs.field(factory=list)  # sampled last but never fed: held by the session, not the cache
    busy: bool = False
    nbytes: int = 0

    def clear(self, config: PretrainedConfig) -> None:
        self.cache = DynamicCache(config=config)
        self.ids = []
        self.unfed = []

    def measure(self) -> int:
        self.nbytes = sum(_layer_bytes(layer) for layer in self.cache.layers)
        return self.nbytes


class KVStore:
    """Slots by session id; least recently used ones are evicted beyond ``budget_bytes``."""

    def __init__(self, model: PreTrainedModel, budget_bytes: int, shift: str = "rotate") -> None:
        if shift not in ("rotate", "recompute"):
            raise ConfigError(f"must be 'rotate' or 'recompute', got {shift!r}", field="shift")
        self.model = model
        self.config = model.config
        self.budget_bytes = budget_bytes
        # a model whose RoPE layout is not known to compose can only recompute (exact anyway)
        self.shift = shift if shift == "recompute" or _rotary(model) is not None else "recompute"
        self._slots: OrderedDict[str, Slot] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def acquire(self, session_id: str) -> Slot:
        """The session's slot (a fresh one if it has none), marked busy and most recently used."""
        with self._lock:
            slot = self._slots.pop(session_id, None) or Slot(DynamicCache(config=self.config))
            if slot.busy:
                self._slots[session_id] = slot
                raise BackendError(f"a generation is already running for session {session_id!r}")
            slot.busy = True
            self._slots[session_id] = slot
            return slot

    def release(self, slot: Slot) -> None:
        with self._lock:
            slot.busy = False
            slot.measure()
            self._evict()

    def _evict(self) -> None:
        total = sum(s.nbytes for s in self._slots.values())
        for sid in [sid for sid, s in self._slots.items() if not s.busy]:  # oldest first
            if total <= self.budget_bytes:
                break
            total -= self._slots.pop(sid).nbytes
            self.evictions += 1

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._slots.pop(session_id, None)

    def clear(self) -> None:
        with self._lock:
            self._slots.clear()

    def held_ids(self, session_id: str) -> list[int] | None:
        """The ids the session's cache holds (None: no cache), for tests and diagnostics."""
        with self._lock:
            slot = self._slots.get(session_id)
            return None if slot is None else list(slot.ids)

    def cache_of(self, session_id: str) -> DynamicCache | None:
        with self._lock:
            slot = self._slots.get(session_id)
            return None if slot is None else slot.cache

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._slots.values())

    # ------------------------------------------------------------------ matching the session
    def reuse(self, slot: Slot, ids: list[int]) -> int:
        """Keep the longest prefix of ``ids`` the slot holds (never all of it: the last id is fed again
        for its logits); crop the rest. Returns how many ids are reused."""
        held = slot.ids
        limit = min(len(held), len(ids) - 1)
        keep = limit if held[:limit] == ids[:limit] else next(i for i in range(limit) if held[i] != ids[i])
        self.crop(slot, keep)
        return keep

    def crop(self, slot: Slot, keep: int) -> None:
        extra = len(slot.ids) - keep
        if extra <= 0:
            return
        # sliding-window and other special layers keep a window, not every position: start over
        if keep == 0 or not _plain(slot.cache):
            slot.clear(self.config)
            return
        slot.cache.crop(-extra)
        del slot.ids[keep:]

    def discard(self, slot: Slot, start: int, count: int) -> None:
        """Remove ids ``[start, start + count)`` from the cache (the 'shift' overflow policy).

        'rotate' (llama.cpp's context shift): the keys after the range were
        rotated for their old positions before caching, so they are rotated
        back by ``count`` positions; the values need nothing. Cheap, but the
        kept tokens' deeper layers still saw the removed text, so the result
        approximates a fresh prefill. 'recompute': crop at ``start`` and let
        :meth:`reuse` prefill the kept tail again, exactly.
        """
        if self.shift == "recompute" or start + count > len(slot.ids) or not _plain(slot.cache):
            self.crop(slot, min(start, len(slot.ids)))
            return
        rotary = _rotary(self.model)
        assert rotary is not None, "a 'rotate' shift is chosen only for a model _rotary knows"
        cos = sin = None
        for layer in slot.cache.layers:
            assert isinstance(layer, DynamicLayer), "_plain says every layer is one"
            keys, values = _keys_values(layer)
            tail = keys[..., start + count:, :]
            if cos is None:
                position = torch.tensor([[-count]], device=keys.device)
                cos, sin = (t / rotary.attention_scaling for t in rotary(tail, position))
                cos, sin = cos[:, None].to(keys.dtype), sin[:, None].to(keys.dtype)
            tail = tail * cos + rotate_half(tail) * sin
            layer.keys = torch.cat([keys[..., :start, :], tail], dim=-2)
            layer.values = torch.cat([values[..., :start, :], values[..., start + count:, :]], dim=-2)
        del slot.ids[start:start + count]


def _plain(cache: DynamicCache) -> bool:
    """Every layer holds every position (sliding-window layers keep only a window)."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


class Rotary(Protocol):
    """A Llama-layout rotary embedding module (``LlamaRotaryEmbedding`` and its copies): the cos and sin of
    ``position_ids``' angles, in ``x``'s dtype, scaled by ``attention_scaling``."""

    attention_scaling: float
    inv_freq: torch.Tensor

    def __call__(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


def _keys_values(layer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """An initialized attention layer's keys and values: every layer of the caches here is taken to be one."""
    assert isinstance(layer, CacheLayerMixin) and layer.keys is not None and layer.values is not None, (
        f"{type(layer).__name__}: a cache layer without keys and values")
    return layer.keys, layer.values


def _layer_bytes(layer: object) -> int:
    """What a layer's keys and values take (0 before its first update)."""
    assert isinstance(layer, CacheLayerMixin), f"{type(layer).__name__}: a cache layer without keys and values"
    return sum(t.nbytes for t in _keys_values(layer)) if layer.is_initialized else 0


def _rotary(model: PreTrainedModel) -> Rotary | None:
    """The model's rotary embedding module when a shift is a plain extra rotation of the keys, else None."""
    config = model.config
    rope = getattr(config, "rope_parameters", None) or {}
    rotary: Rotary | None = getattr(getattr(model, "model", None), "rotary_emb", None)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if config.model_type not in ROTATE_HALF_MODELS or rope.get("rope_type", "default") not in LINEAR_ROPE:
        return None
    if rotary is None or rotary.inv_freq.shape[-1] * 2 != head_dim:  # partial rotary: not this layout
        return None
    return rotary
