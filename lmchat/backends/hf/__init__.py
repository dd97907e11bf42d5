"""The ``hf`` backend (``--backend hf``, the ``hf`` extra): transformers and torch, for Hugging Face
model folders; per-session ``DynamicCache`` kept between turns (:mod:`.kvcache`)."""
from .backend import HFBackend

__all__ = ["HFBackend"]
