"""``lmchat export``: a Hugging Face Jinja ``chat_template`` equivalent to a built-in template.

Data templates export (affix templates such as the ChatML family, XTuner
templates); a template whose rendering is code is refused with a pointer to
its official template.
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--template", required=True, metavar="NAME", help="registered template name or alias")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="write the template here (e.g. chat_template.jinja) instead of standard output")


def run(args: argparse.Namespace) -> int:
    from ..interop.export import export_jinja
    from ..registry import get_template

    text = export_jinja(get_template(args.template))
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    return 0
