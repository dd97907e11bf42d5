"""``lmchat chat``: an interactive session with a model, saved after every turn (docs/repl.md)."""
from __future__ import annotations

import argparse
import io
import shlex
import sys
from pathlib import Path

from .. import logs
from ..backends.base import BACKEND_ALIASES, Backend, ModelTemplate, SessionLimit, Threaded, engine_id, get_backend
from ..errors import SessionError, UnknownTemplate
from ..interop.loading import saveable
from ..jsontypes import JSONObject
from ..paths import data_dir
from ..registry import get_template
from ..repl import settings
from ..repl.commands import help_lines
from ..repl.context import DEFAULT_OVERFLOW, choose_context
from ..repl.conversation import NOTES, Conversation
from ..repl.history import default_store_path, input_history
from ..repl.rendering import PlainOutput, RichOutput
from ..repl.resuming import find, recap
from ..session import DRIFT_POLICIES, Session, SessionPolicy
from ..session.edits import restored
from ..stores import open_store, version_of
from ..stores.base import SessionStore
from ..templates.base import BaseTemplate
from .backend_args import DEFAULT as DEFAULT_BACKEND
from .backend_args import add_backend_arguments, backend_options, injection_policy
from .common import add_template_arguments, resolve_template
from .main import UsageError
from .sampling_args import add_sampling_arguments, given
from .startup import kv_lines, model_line

LATEST = "latest"  # --resume without an id

EPILOG = """commands (type them at the prompt; Tab completes):
{commands}

keys: Enter sends; Alt+Enter or Esc Enter inserts a newline (pastes keep theirs);
a message that starts with \"\"\" goes on over lines until one that ends with \"\"\";
Up/Down recall earlier inputs; Ctrl-C stops a reply (the partial answer is kept)
or clears the line; Ctrl-D leaves.

With stdin or stdout not a terminal, each input line is a message or a command
and replies are printed as plain text. Files: $LMCHAT_DATA_DIR (default: the user data dir)
holds 'history' (inputs) and 'sessions.db' (conversations, saved after every turn; one-shots with --save).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG.format(commands="\n".join(help_lines()))
    p.add_argument("prompt", nargs="?", metavar="PROMPT",
                   help="answer this one message, print the answer and exit; '-' reads it from stdin. Not saved "
                        "(--resume continues your last conversation, never a one-shot) unless --save or --resume")
    p.add_argument("--save", action="store_true",
                   help="with PROMPT: save the one-shot exchange as a session (then --resume continues it)")
    add_template_arguments(p, required=False)
    add_backend_arguments(p)
    for action in p._actions:  # the REPL has one session: the context is not shared (_one_session)
        if action.dest == "ctx":
            action.help = ("llamacpp: the session's context (default: the model's trained length, bounded by "
                           "memory; said at start)")
        elif action.dest == "sessions":
            action.help = "llamacpp: resident sequences sharing --ctx (default: 1, this conversation)"
    p.add_argument("--system", metavar="TEXT", help="system prompt (with --resume: replaces the stored one)")
    p.add_argument("--resume", nargs="?", const=LATEST, metavar="ID",
                   help="continue the last conversation saved (in the terminal or piped: one-shots are not saved), "
                        "or the one with this id (a unique prefix will do; /sessions lists them)")
    p.add_argument("--drift", choices=DRIFT_POLICIES,
                   help="when the engine's ids of an answer differ from their canonical encoding: 'rewind' "
                        "(default) drops them from the cache and sends the canonical ones, 'reset' resends the "
                        "conversation, 'keep' continues from the engine's own ids (docs/tokens.md); with --resume: "
                        "replaces the stored policy")
    p.add_argument("--format", metavar="json|SCHEMA_FILE",
                   help="every answer is a JSON object ('json') or JSON valid against the schema in SCHEMA_FILE "
                        "(as /set format json | @FILE; 'off' drops a resumed session's); llamacpp and remote backends")
    p.add_argument("--store", metavar="PATH",
                   help="SQLite file of saved sessions (default: <data dir>/sessions.db); 'memory' keeps nothing")
    add_sampling_arguments(p)  # as /set NAME VALUE: saved with the session; with --resume, they replace its own
    web = p.add_argument_group("the web page instead of the terminal")
    web.add_argument("--web", action="store_true",
                     help="serve this engine with lmchat serve and open its web chat page in the browser "
                          "(docs/web.md): lmchat serve --open with the same engine, template and sampling options")
    web.add_argument("--port", type=int, default=8000, help="with --web: the server's port (default: 8000)")


def run(args: argparse.Namespace) -> int:
    if args.web:
        from . import chat_web

        return chat_web.run(args)
    if args.port != 8000:
        raise UsageError("--port goes with --web (the terminal chat listens on nothing)")
    from ..repl.app import run_plain, run_terminal  # prompt_toolkit: only `lmchat chat` pays for it

    template: BaseTemplate | None = None
    if args.template or args.chat_template:
        template = saveable(resolve_template(args), args.chat_template or args.template)
    one_shot = args.prompt is not None
    if args.save and not one_shot:
        raise UsageError("--save goes with PROMPT: a conversation is always saved (--store memory keeps nothing)")
    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not one_shot
    out: RichOutput | PlainOutput = RichOutput() if interactive else PlainOutput()
    logs.to_file(data_dir() / "debug.log")  # library warnings must not land in the conversation
    # a one-shot is a question, not a conversation: kept only when asked, so --resume finds the conversation
    keep = not one_shot or args.save or args.resume is not None
    store = open_store((args.store or default_store_path()) if keep else "memory")
    backend: Backend | None = None
    try:
        if interactive and args.backend in ("llamacpp", "embedded", "hf"):
            out.info("loading the model…")
        options, context = _one_session(args, backend_options(args))
        backend = get_backend(args.backend, **options)
        conv = _open(args, store, backend, template, out)
        if args.format:
            _set_format(conv, args.format)
        conv.overrides.update(given(args))
        if one_shot:
            conv.notes = _one_shot_notes(keep)
            return run_plain(conv, io.StringIO(_one_message(args.prompt)))
        if not interactive:  # a script has its own record of the conversation: no recap on its stderr
            return run_plain(conv, sys.stdin)
        threads = f" · {backend.threads} threads" if isinstance(backend, Threaded) else ""
        out.info(
            f"lmchat chat · {conv.session.template.name} · {backend.name}{threads} · session "
            f"{conv.session.session_id[:8]} ({'resumed' if args.resume else 'new'}) · /help lists the commands, "
            "Ctrl-D leaves"
        )
        for line in (model_line(backend), context, *kv_lines(backend)[1:]):  # host memory: not for one session
            if line:
                out.info(line)
        if args.resume:
            out.info(f"resumed session {conv.session.session_id[:8]}: {recap(conv)}")
        status = run_terminal(conv, history=input_history())
        out.info(_resume_hint(args, conv))
        return status
    finally:
        if backend is not None:
            backend.close()
        store.close()


def _one_session(args: argparse.Namespace, options: JSONObject) -> tuple[JSONObject, str | None]:
    """The llamacpp backend's options for the REPL's one conversation, and the line that says its context.

    ``lmchat serve``'s defaults share the context among 4 resident sessions; the REPL has one, which gets it all
    (``--sessions`` still shares it, as asked): the model's trained length, bounded by memory, or ``--ctx``."""
    if BACKEND_ALIASES.get(args.backend, args.backend) != "llamacpp" or args.sessions is not None:
        return options, None
    options = {**options, "sessions": 1}
    if args.ctx:
        return options, f"context: {args.ctx} tokens (--ctx)"
    from ..backends.bundled import default_gguf

    choice = choose_context(Path(args.model).expanduser() if args.model else default_gguf())
    if choice is None:
        return options, None  # the backend's default; llama.cpp says what is wrong with the file
    options["ctx"] = choice.tokens
    return options, f"context: {choice.tokens} tokens ({choice.why}; --ctx TOKENS sets another)"


def _open(args: argparse.Namespace, store: SessionStore, backend: Backend, template: BaseTemplate | None,
          out: RichOutput | PlainOutput) -> Conversation:
    """A new session, or the stored one ``--resume`` names (its first delta resets: the cache is gone)."""
    tokenizer = backend.tokenizer  # token deltas whenever the backend has one (None: a text-only backend)
    injection = injection_policy(backend, args)  # 'reject' when prompts go upstream as text
    if injection:
        out.info("prompts go to the server as text: messages holding the template's special strings are refused "
                 "(--allow-special-text sends them anyway)")
    if args.resume is None:
        if template is None:
            template = _backend_template(backend, args.backend)
        policy = SessionPolicy(session_len=backend.session_len if isinstance(backend, SessionLimit) else None,
                               overflow=DEFAULT_OVERFLOW, injection=injection or "split", drift=args.drift or "rewind")
        session = Session(template, system=args.system, tokenizer=tokenizer, policy=policy)
        return Conversation(session, backend, store, out, tokenizer=tokenizer)
    session_id = store.latest() if args.resume == LATEST else find(store, args.resume)
    data = store.load(session_id) if session_id else None
    if not session_id or data is None:  # (no id: no data)
        which = "to resume" if args.resume == LATEST else repr(args.resume)
        raise SessionError(f"no stored session {which} in {args.store or 'the default store'}")
    try:
        session = restored(data, tokenizer, "resumed: the engine holds nothing for this session")
    except UnknownTemplate:
        stored_template = data["template"]
        name = stored_template.get("name", "") if isinstance(stored_template, dict) else ""
        if isinstance(name, str) and name.startswith("file:"):
            raise SessionError(f"session {session_id[:8]} uses a template file: "
                               f"pass --chat-template {name[5:]}") from None
        raise
    conv = Conversation(session, backend, store, out, tokenizer=tokenizer, version=version_of(data))
    conv.restore_settings(data)
    if args.drift:
        session.drift = args.drift
    if injection:
        session.injection = injection
    stored_engine, engine = data.get("engine"), engine_id(backend)
    if (template is None and stored_engine and stored_engine != engine and isinstance(backend, ModelTemplate)
            and backend.template_name):
        out.info(f"session {session_id[:8]} was saved with {stored_engine}; continuing with {engine}")
        template = get_template(backend.template_name)  # the template belongs to the model
    if template is not None and template != session.template:
        out.info(conv.set_template(template))
    if args.system is not None:
        conv.set_system(args.system)
    return conv


def _set_format(conv: Conversation, value: str) -> None:
    """``--format``: as ``/set format`` (saved with the session); a bad file or a backend that cannot constrain is
    a usage error, before any turn."""
    try:
        if value == "off":
            conv.overrides.pop("format", None)
            return
        fmt = settings.parse("format", value if value == "json" or value.startswith("@") else "@" + value)
        conv.check_format(fmt)
    except settings.SettingError as exc:
        raise UsageError(str(exc).replace("/set format", "--format", 1)) from None
    conv.overrides["format"] = fmt


def _resume_hint(args: argparse.Namespace, conv: Conversation) -> str:
    """What leaving says: the command that continues this session (the one now current: /fork, /load)."""
    if args.store == "memory":
        return "the session was not kept (--store memory)"
    if conv.version == 0:
        return "nothing was saved: the session had no turns"
    command = ["lmchat", "chat", "--resume", conv.session.session_id[:8]]
    if args.backend != DEFAULT_BACKEND:
        command += ["--backend", args.backend]
    for option in ("model", "base_url", "chat_template", "store"):
        if getattr(args, option, None):
            command += ["--" + option.replace("_", "-"), getattr(args, option)]
    return f"session {conv.session.session_id[:8]} saved; continue it with: {shlex.join(command)}"


def _one_shot_notes(kept: bool) -> dict[str, str]:
    """What a one-shot says under its answer: it has no prompt to type /continue at."""
    more = "; `lmchat chat --resume` then /continue extends this one" if kept else ""
    return {**NOTES, "length": f"[stopped at max_new_tokens: --max-new-tokens N allows a longer answer{more}]"}


def _one_message(prompt: str) -> str:
    """The one-shot prompt as one input of the plain loop: always a message, even with newlines."""
    text = sys.stdin.read() if prompt == "-" else prompt
    if text.startswith("/"):
        text = "/" + text  # a message, not a command
    return f'"""{text}"""' if "\n" in text else text


def _backend_template(backend: Backend, name: str) -> BaseTemplate:
    template_name = backend.template_name if isinstance(backend, ModelTemplate) else None
    if template_name is None:
        raise UsageError(
            f"the {name} backend does not say which template it needs: pass --template NAME or --chat-template FILE"
        )
    return get_template(template_name)
