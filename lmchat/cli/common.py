"""Arguments shared by the commands that need a template (render now; chat and serve reuse them)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..templates.base import BaseTemplate

CHAT_TEMPLATE_HELP = (
    "template file instead of a name: an LMDeploy chat template config or an XTuner template dict (.json), "
    "a Jinja template (.jinja, .j2, or .json with 'chat_template'), a model folder, or a .gguf file"
)


def add_template_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``--template NAME`` or ``--chat-template FILE``: one of them (at most one when not ``required``)."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--template", metavar="NAME",
                       help="registered template name or alias (see `lmchat templates`; default, where there is one: "
                            "the model's own, as `lmchat match` finds it)")
    group.add_argument("--chat-template", metavar="FILE", help=CHAT_TEMPLATE_HELP)


def resolve_template(args: argparse.Namespace) -> BaseTemplate:
    """The template the parsed arguments name."""
    if args.chat_template is not None:
        from ..interop.loading import load_template_path

        return load_template_path(args.chat_template)
    from ..registry import get_template

    return get_template(args.template)
