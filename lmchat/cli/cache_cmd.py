"""``lmchat cache``: where the llamacpp backend's KV files are and how big (``show``), or remove them (``clear``).

``lmchat chat`` and ``lmchat serve`` keep every conversation's KV state in files under the data dir (``--kv-dir``,
at most ``--kv-disk-mb``, 4096 MB by default), so a resumed conversation or a restarted server does not prefill
what it had. They are a cache: removing them loses nothing but that time.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("show", "clear"), default="show",
                   help="show (default): the directory, its files and their size; clear: remove the files (the "
                        "next turns prefill their prompts again; nothing of the conversations is lost)")
    p.add_argument("--kv-dir", metavar="DIR", help="the directory (default: <data dir>/kv, as lmchat chat and "
                                                   "lmchat serve use it)")


def run(args: argparse.Namespace) -> int:
    from ..backends.llamacpp.backend import DEFAULT_DISK_MB
    from ..backends.llamacpp.kvfiles import own_files
    from .backend_args import default_kv_dir
    from .startup import count

    directory = Path(args.kv_dir).expanduser() if args.kv_dir else default_kv_dir()
    files = own_files(directory)
    size = sum(_size(f) for f in files)
    if args.action == "show":
        print(f"KV files: {directory}: {count(len(files), 'file')}, {_mb(size)} (at most --kv-disk-mb, default "
              f"{DEFAULT_DISK_MB} MB; `lmchat cache clear` removes them)")
        return 0
    removed = 0
    for f in files:
        try:
            f.unlink()
            removed += 1
        except FileNotFoundError:
            pass  # an engine using the directory removed it first
    print(f"removed {count(removed, 'KV file')} ({_mb(size)}) from {directory}; the key beside them stays")
    return 0


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"
