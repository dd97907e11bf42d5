"""Built-in chat templates: one module per model family.

Importing this package registers every family module found in it, so a new
family is one new file; nothing else needs editing.
"""
import importlib
import pkgutil

from .affix import AffixTemplate
from .base import BaseTemplate
from .chat import Chat

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.name.startswith("_") and _mod.name not in ("base", "render_utils"):
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["AffixTemplate", "BaseTemplate", "Chat"]
