"""Where lmchat keeps its files: the user data dir, or ``$LMCHAT_DATA_DIR``.

The REPL keeps its input ``history``, its sessions (``sessions.db``) and its
``debug.log`` there; ``lmchat serve`` its default stores (``server-*.db``).
"""
from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "LMCHAT_DATA_DIR"


def data_dir() -> Path:
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("lmchat"))
