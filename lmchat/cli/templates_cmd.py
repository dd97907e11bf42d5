"""``lmchat templates``: the registry with aliases and bundled sampling settings."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def catalogue() -> list[dict[str, Any]]:
    from ..registry import aliases_of, template_class, template_names

    rows = []
    for name in template_names():
        cls = template_class(name)
        t = cls()
        rows.append(
            {
                "name": name,
                "aliases": aliases_of(name),
                **{k: list(v) if isinstance(v, tuple) else v for k, v in t.sampling_params.items()},
                "official": cls.official,
                "hyperparameter_source": cls.hyperparameter_source,
                "prefix_stable": cls.prefix_stable,
                "tools": cls.supports_tools,
                "summary": (cls.__doc__ or "").strip().splitlines()[0],
            }
        )
    return rows


def run(args: argparse.Namespace) -> int:
    rows = catalogue()
    if args.json:
        json.dump(rows, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
        return 0
    header = ("NAME", "SESSION_LEN", "TOP_P", "TOP_K", "TEMP", "REP_PEN", "CAPABILITY", "ALIASES")
    table = [header] + [
        (
            r["name"],
            str(r["session_len"]),
            str(r["top_p"]),
            str(r["top_k"]),
            str(r["temperature"]),
            str(r["repetition_penalty"]),
            r["capability"],
            ", ".join(r["aliases"]),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    return 0
