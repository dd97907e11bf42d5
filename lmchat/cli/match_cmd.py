"""``lmchat match``: which template fits a model, and why."""
from __future__ import annotations

import argparse
import json

DESCRIPTION = """\
Which built-in template fits a model, and the evidence, strongest first: the chat template the model ships
(a folder's chat_template.jinja or tokenizer_config.json, a GGUF's embedded tokenizer.chat_template) when it
is a built-in's official text; the architecture (config.json model_type, a GGUF's general.architecture),
which only narrows those candidates; then name rules on a GGUF's general.name and general.basename, a
folder's config.json _name_or_path, and the file, folder or hub id's own name. So my-model.gguf is matched
by what it holds, not what it is called. Exit status 2 when nothing or several fit equally (the candidates
are listed); the llamacpp backend then runs a GGUF on its own embedded template."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = DESCRIPTION
    p.add_argument(
        "model", metavar="PATH_OR_ID",
        help="a local model folder, a GGUF file (whatever its name) or another file, or a hub id such as "
             "Qwen/Qwen2.5-7B-Instruct",
    )
    p.add_argument("--json", action="store_true", help='print {"template": ..., "evidence": [...]} instead')


def run(args: argparse.Namespace) -> int:
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
