"""``lmchat models``: the bundled model's file (where it is, its size, template and trained context), or those of
the GGUF files given."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import LmchatError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE.gguf",
                   help="GGUF files to describe (default: the bundled model, which --model replaces)")


def run(args: argparse.Namespace) -> int:
    from ..errors import MissingExtra

    if args.files:
        paths = [Path(f).expanduser() for f in args.files]
    else:
        from ..backends.bundled import default_gguf

        try:
            paths = [default_gguf()]
        except MissingExtra as exc:
            print(f"bundled model: not installed ({exc})")
            return 1
    failed = 0
    for path in paths:
        try:
            print(describe(path, bundled=not args.files))
        except (LmchatError, OSError, ValueError) as exc:
            print(f"{path}: {exc}")
            failed += 1
    return 1 if failed else 0


def describe(path: Path, *, bundled: bool = False) -> str:
    """``PATH (94 MB) · template smollm2 · trained context 8192 tokens``, read from the file's header."""
    from ..interop.matching import explain_match
    from ..repl.context import gguf_fields

    size = os.path.getsize(path)
    train = gguf_fields(path).get("context_length")
    template = explain_match(str(path)).name
    what = "bundled model: " if bundled else ""
    context = f" · trained context {train} tokens" if isinstance(train, int) else ""
    return f"{what}{path} ({size / 2**20:.0f} MB) · template {template}{context}"
