"""Entry point of the ``lmchat`` command.

Subcommand modules are imported only when used, so ``lmchat render`` never
pays for the REPL or the server.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Collection

from ..errors import LmchatError

#: subcommand -> (module, one-line help)
COMMANDS = {
    "templates": ("lmchat.cli.templates_cmd", "list registered templates, aliases and bundled sampling settings"),
    "render": ("lmchat.cli.render_cmd", "render a conversation (or its per-turn deltas) byte-exactly"),
    "check": ("lmchat.cli.check_cmd",
              "compare a built-in template with a Jinja chat template (file, model folder, GGUF)"),
    "export": ("lmchat.cli.export_cmd", "write a Jinja chat_template equivalent to a built-in template"),
    "match": ("lmchat.cli.match_cmd", "which template fits a model folder, GGUF file or hub id, and the evidence"),
    "chat": ("lmchat.cli.chat_cmd", "interactive chat with a model; sessions are saved after every turn and resumable"),
    "serve": ("lmchat.cli.serve_cmd", "serve sessions over HTTP: LMDeploy's interactive protocol and OpenAI's API"),
    "models": ("lmchat.cli.models_cmd", "where the bundled model's GGUF is, its size, template and context"),
    "cache": ("lmchat.cli.cache_cmd", "where the KV files of past conversations are and how big; 'clear' removes them"),
}


class UsageError(LmchatError, ValueError):
    """Bad command-line input (exit status 2)."""


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``lmchat`` parser. Each subcommand's options come from its module, imported here for the subcommands
    in ``commands`` (all when None); any other is listed with its help line only: main() passes the one the
    command line names, so ``lmchat serve`` never imports the REPL and the other commands."""
    parser = argparse.ArgumentParser(
        prog="lmchat",
        description="Exact chat prompts and stateful interactive sessions for chat LLMs.",
    )
    parser.add_argument("--version", action="version", version=f"lmchat {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if commands is None or name in commands:
            importlib.import_module(module).add_arguments(p)
    return parser


def _version() -> str:
    """The installed distribution's version (what pip knows), else the package's own."""
    from importlib import metadata

    try:
        return metadata.version("lmchat")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        from .. import __version__

        return __version__


def command_named(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (``lmchat``'s own options, -h and
    --version, take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser({command_named(argv) or ""})
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        return importlib.import_module(args._module).run(args) or 0
    except BrokenPipeError:  # e.g. `lmchat templates | head`, `lmchat chat ... | head`: the reader has gone
        # stdout still holds what could not be written: point it at /dev/null so that flushing it at
        # exit does not fail again (Python would print "Exception ignored ... BrokenPipeError")
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (LmchatError, ValueError, OSError) as exc:
        print(f"lmchat {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
