"""``lmchat match``: which template fits a model, and why."""
from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument(
        "model", metavar="PATH_OR_ID", help="a local model folder or file, or a hub id such as Qwen/Qwen2.5-7B-Instruct"
    )
    p.add_argument("--json", action="store_true", help='print {"template": ..., "evidence": [...]} instead')


def run(args) -> int:
    from ..interop.matching import explain_match

    match = explain_match(args.model)
    if args.json:
        print(json.dumps({"template": match.name, "evidence": list(match.evidence)}, ensure_ascii=False))
    else:
        # the name alone on the first line, so `lmchat match X | head -n 1` is scriptable
        print(match.name)
        for line in match.evidence:
            print(f"  {line}")
    return 0
