"""``lmchat check``: does a Jinja chat template render exactly what a built-in renders?

The Jinja side is a ``.jinja`` file, a Hugging Face model folder or a ``.gguf``
file. Both render a battery of conversations (with and without the generation
prompt, tool conversations when the built-in supports tools) at a fixed date.
Exit status 0 when they agree everywhere, 1 at the first difference.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..interop.jinja import JinjaTemplate
    from ..templates.base import BaseTemplate


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--template", required=True, metavar="NAME", help="registered template name or alias")
    p.add_argument("--jinja", required=True, metavar="FILE",
                   help="a .jinja chat template, a Hugging Face model folder, or a .gguf file")
    p.add_argument("--bos-token", metavar="TEXT",
                   help="bos_token for the Jinja template (default: the folder's/GGUF's, else the built-in's)")
    p.add_argument("--eos-token", metavar="TEXT",
                   help="eos_token for the Jinja template (default: the folder's/GGUF's, else the built-in's)")


def jinja_side(builtin: BaseTemplate, path: Path, bos: str | None, eos: str | None) -> JinjaTemplate:
    """The template at ``path``; a bare .jinja file borrows the built-in's special tokens unless given."""
    from ..errors import TemplateConfigError
    from ..interop.jinja import JinjaTemplate
    from ..interop.loading import load_template_path

    candidate = load_template_path(str(path))
    if not isinstance(candidate, JinjaTemplate):
        raise TemplateConfigError("not a Jinja chat template", source=str(path))
    tokens: dict[str, str] = {}
    if not path.is_dir() and path.suffix.lower() != ".gguf":  # a folder or GGUF brings its own tokens
        tokens.update(type(builtin).hf_special_tokens)
        if builtin.bos:
            tokens.setdefault("bos_token", builtin.bos)
    tokens.update({k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None})
    return candidate.evolve(special_tokens={**candidate.tokens, **tokens}) if tokens else candidate


def run(args: argparse.Namespace) -> int:
    from ..interop.battery import first_difference
    from ..registry import get_template

    builtin = get_template(args.template)
    path = Path(args.jinja)
    candidate = jinja_side(builtin, path, args.bos_token, args.eos_token)
    count, diff = first_difference(builtin, candidate, with_tools=type(builtin).supports_tools)
    if diff is None:
        print(f"{builtin.name} and {path.name}: identical on {count} conversations")
        return 0
    print(f"{builtin.name} and {path.name} differ (conversation {count} of the battery)")
    print(diff.describe(names=(f"built-in {builtin.name}", f"jinja {path.name}")))
    return 1
