"""The ``hf`` backend (``--backend hf``, the ``hf`` extra): transformers and torch, for Hugging Face
model folders; per-session ``DynamicCache`` kept between turns (:mod:`.kvcache`).

``HFBackend`` is imported on first use: it imports torch (seconds), which :mod:`.convert` does not need."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import HFBackend

__all__ = ["HFBackend"]


def __getattr__(name: str) -> Any:
    if name == "HFBackend":
        from .backend import HFBackend

        return HFBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
