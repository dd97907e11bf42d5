"""The slash commands: one table, used by /help, the completer and `lmchat chat --help`."""
from __future__ import annotations

import difflib
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import attrs

from ..errors import LmchatError
from ..interop.loading import load_template, saveable
from ..paths import data_dir
from . import aliases, resuming, settings
from .conversation import Conversation, describe_delta, forked_from, printable, turns

EXIT = object()  # a handler's return value that ends the REPL

SHOW = ("template", "params", "context", "delta", "cache", "info")


class CommandError(LmchatError, ValueError):
    """A slash command was misused; the message gives its usage."""


@attrs.frozen
class Command:
    usage: str
    help: str
    run: Callable[[Conversation, str], object]


COMMANDS: dict[str, Command] = {}
#: a command's handler: what it returns is ignored, but EXIT ends the REPL
Handler = Callable[[Conversation, str], object]


def command(usage: str, help_text: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        COMMANDS[usage.split()[0]] = Command(usage, help_text, fn)
        return fn

    return deco


def dispatch(conv: Conversation, line: str) -> bool:
    """Run one command line (Ollama's spellings too: :mod:`.aliases`); False when the REPL should end."""
    match = re.match(r"(\S+)\s*(.*)", aliases.rewrite(line).strip(), re.S)
    assert match is not None  # noqa: S101 - the REPL dispatches only lines that start with "/"
    name, arg = match.groups()
    cmd = COMMANDS.get(name)
    if cmd is None:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise CommandError(f"unknown command {name}: {hint}/help lists the commands "
                           "(// sends a message starting with /)")
    return cmd.run(conv, arg.strip()) is not EXIT


#: how to type what is not a one-line message (shown by /help and `lmchat chat --help`)
INPUT_HELP = [
    'a message over several lines: start it with """ and end it with """ (Enter goes on until then),',
    "or Alt+Enter (Esc Enter) for a newline; // sends a message that starts with /",
]


def help_lines() -> list[str]:
    return [f"  {c.usage:<30} {c.help}" for c in COMMANDS.values()]


def completion_tree(template_names: list[str]) -> dict[str, dict[str, None] | None]:
    """Each command and the words its argument can be."""
    args = {
        "/set": dict.fromkeys(settings.SETTINGS),
        "/show": dict.fromkeys(SHOW),
        "/debug": dict.fromkeys(("on", "off")),
        "/template": dict.fromkeys(template_names),
    }
    return {name: args.get(name) for name in COMMANDS}


# ---------------------------------------------------------------------- commands
@command("/help", "this list")
def _help(conv: Conversation, arg: str) -> None:
    conv.out.show("\n".join(["commands:", *help_lines(), "", *INPUT_HELP, aliases.HELP]))


@command("/system [TEXT]", "show or set the system prompt (the next turn resends the conversation)")
def _system(conv: Conversation, arg: str) -> None:
    if not arg:
        first = conv.session.first_message()
        if first and first["role"] == "system":
            conv.out.show(first["content"])
            return
        default = conv.session.template.meta_instruction
        if default:  # the template renders its own when the conversation has none
            conv.out.show(default)
            conv.out.info(f"[no system prompt set: {conv.session.template.name} renders this default one; "
                          "/system TEXT replaces it]")
            return
        conv.out.show("(no system prompt)")
        return
    conv.set_system(arg)
    conv.out.info("system prompt set; the next turn sends the whole conversation")


@command("/reset", "start over (the system prompt stays)")
def _reset(conv: Conversation, arg: str) -> None:
    conv.session.reset()
    conv.last = conv.last_delta = None  # the toolbar's last turn is gone with it
    conv.save()
    conv.out.info("conversation cleared")


@command("/undo", "drop the last exchange")
def _undo(conv: Conversation, arg: str) -> None:
    dropped = conv.session.undo()
    conv.last = conv.last_delta = None  # the toolbar's last turn is gone with it
    conv.save()
    conv.out.info(f"dropped the last exchange ({len(dropped)} messages)")


@command("/retry", "drop the last exchange and answer its message again")
def _retry(conv: Conversation, arg: str) -> None:
    conv.retry()


@command("/continue", "generate more after the last answer (e.g. one cut by max_new_tokens)")
def _continue(conv: Conversation, arg: str) -> None:
    conv.continue_answer()


@command("/set [NAME VALUE|default]", f"this session's {', '.join(settings.SETTINGS)} (saved with it)")
def _set(conv: Conversation, arg: str) -> None:
    name, _, raw = arg.partition(" ")
    raw = raw.strip()
    if not name:
        _show_params(conv)
        return
    if name not in settings.SETTINGS or not raw:
        raise CommandError(f"usage: /set NAME VALUE|default, NAME one of {', '.join(settings.SETTINGS)}")
    if raw == "default" or raw == settings.OFF.get(name):
        conv.overrides.pop(name, None)
    else:
        value = settings.parse(name, raw)
        if name == "format":
            conv.check_format(value)  # refused now, not at the next turn
        conv.overrides[name] = value
    conv.session.overflow, conv.session.overflow_room = conv.overflow, conv.overflow_room
    conv.save()
    conv.out.info(f"{name} = {_setting(conv, name)!r}")


def _setting(conv: Conversation, name: str) -> object:
    if name == "format":
        return settings.describe_format(settings.format_of(conv.overrides.get("format")))
    if name in ("overflow", "overflow_room"):
        return getattr(conv, name)
    return getattr(conv.params, name)


def _show_params(conv: Conversation) -> None:
    # the constraint is shown as the format that made it (a schema's JSON text would fill the screen)
    params = {**attrs.asdict(conv.params, recurse=False, filter=lambda a, v: a.name != "constraint"),
              "overflow": conv.overflow, "overflow_room": conv.overflow_room, "format": _setting(conv, "format")}
    lines = [f"{k} = {v!r}{'  (set)' if k in conv.overrides else ''}" for k, v in params.items()]
    conv.out.show("\n".join(lines))


@command("/show WHAT", "WHAT: template, params, context (what the engine holds), delta (the last one sent), "
                      "cache (how much of the next turn the engine's cache serves, and from where) or info (the "
                      "model, engine, template, context and sampling)")
def _show(conv: Conversation, arg: str) -> None:
    if arg not in SHOW:
        raise CommandError(f"usage: /show {'|'.join(SHOW)}")
    session = conv.session
    if arg == "params":
        _show_params(conv)
    elif arg == "template":
        t = session.template
        lines = [f"template: {t.name}", f"end of turn (eoa): {t.eoa!r}"]
        lines += [f"{k}: {v!r}" for k, v in t.sampling_params.items()]
        conv.out.show("\n".join(lines))
    elif arg == "cache":
        conv.out.show(resuming.cache_line(conv))
    elif arg == "info":
        conv.out.show(aliases.info(conv))
    elif arg == "context":
        conv.out.show(session.context or "(the engine holds nothing for this session yet)")
        state = session.to_dict()
        if state["needs_reset"] and session.context:
            conv.out.info(f"[the next delta resets and replaces it: {state['reset_reason'] or 'reset requested'}]")
        conv.out.info(_limit_line(conv))
    else:
        conv.out.show(describe_delta(conv.last_delta) if conv.last_delta else "(no delta sent yet)")


def _limit_line(conv: Conversation) -> str:
    """How full the context is and what happens when it is (the toolbar's count, the engine's limit)."""
    session = conv.session
    if not session.counts_tokens:
        return f"[{session.step} characters held (no tokenizer: no limit is checked)]"
    room = f"until {conv.overflow_room:.0%} of it is free (/set overflow_room)"
    what = {"shift": f"the oldest turns leave the engine's cache {room}, the system prompt stays",
            "truncate": f"the oldest turns are dropped {room} and the rest is sent again",
            "error": "a turn that does not fit is refused"}[conv.overflow]
    return (f"[{session.step} of {session.session_len} tokens held; when it is full {what} "
            f"(/set overflow {conv.overflow})]")


@command("/debug on|off", "print each delta exactly as sent")
def _debug(conv: Conversation, arg: str) -> None:
    if arg not in ("on", "off"):
        raise CommandError("usage: /debug on|off")
    conv.debug = arg == "on"
    conv.out.info(f"debug {arg}")


@command("/save [FILE]", "write the session as JSON (default: <data dir>/saved/lmchat-<id>.json); never overwrites")
def _save(conv: Conversation, arg: str) -> None:
    # a resumed id comes from the store: only file-name characters of it name the file
    name = re.sub(r"[^A-Za-z0-9._-]", "_", conv.session.session_id[:8])
    path = Path(arg).expanduser() if arg else data_dir() / "saved" / f"lmchat-{name}.json"
    if path.exists():
        raise CommandError(f"{path} exists: /save! {path} overwrites it")
    _write(conv, path)


@command("/save! FILE", "like /save, replacing FILE if it exists")
def _save_over(conv: Conversation, arg: str) -> None:
    if not arg:
        raise CommandError("usage: /save! FILE")
    _write(conv, Path(arg).expanduser())


def _write(conv: Conversation, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conv.save_file(str(path))
    conv.out.info(f"saved to {path}")


@command("/load FILE", "continue a session saved with /save")
def _load(conv: Conversation, arg: str) -> None:
    if not arg:
        raise CommandError("usage: /load FILE")
    conv.load_file(arg)
    conv.out.info(f"loaded session {printable(conv.session.session_id[:8])} ({turns(conv.session.turns)}) from "
                  f"{printable(arg)}")


@command("/sessions [ID]", "list stored sessions, or continue the one with this id (a unique prefix will do)")
def _sessions(conv: Conversation, arg: str) -> None:
    if arg:
        conv.out.info(resuming.switch(conv, arg))
        return
    infos = conv.store.list(limit=20)
    if not infos:
        conv.out.show("(no stored sessions)")
        return
    lines = []
    titles = Counter(i.title for i in infos)
    for i in infos:
        mark = "*" if i.id == conv.session.session_id else " "
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(i.updated_at))
        lines.append(f"{mark} {printable(i.id[:8])}  {when}  {turns(i.turns, 3):<9}  {printable(i.template):<14} "
                     f"{printable(i.title)}{_fork_of(conv, i.id) if titles[i.title] > 1 else ''}")
    conv.out.show("\n".join(lines))


def _fork_of(conv: Conversation, session_id: str) -> str:
    """`` (fork of ID)`` for a session /fork made, whose title is its origin's (read only for titles that repeat)."""
    data = conv.store.load(session_id)
    origin = forked_from(data) if data is not None else None
    return f"  (fork of {printable(origin[:8])})" if origin else ""


@command("/fork", "copy the session under a new id and continue in the copy")
def _fork(conv: Conversation, arg: str) -> None:
    old = conv.fork()
    conv.out.info(f"forked {printable(old[:8])} -> {printable(conv.session.session_id[:8])}; continuing in the copy")


@command("/template [NAME|FILE]", "show or switch the template (a reset: the backend cache is dropped)")
def _template(conv: Conversation, arg: str) -> None:
    if not arg:
        conv.out.show(conv.session.template.name)
        return
    conv.out.info(conv.set_template(saveable(load_template(arg), arg)))


@command("/exit", "leave (Ctrl-D too)")
def _exit(conv: Conversation, arg: str) -> object:
    return EXIT
