"""``lmchat serve``: sessions over HTTP, LMDeploy's interactive protocol and OpenAI's API (docs/server.md)."""
from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import os
import re
import socket
import threading
import time
import urllib.request
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING

from .. import logs
from ..backends.base import ModelTemplate, engine_id, get_backend
from ..session import DRIFT_POLICIES, OVERFLOW_POLICIES, SessionPolicy
from .backend_args import add_backend_arguments, backend_options, injection_policy, session_len
from .common import add_template_arguments, resolve_template
from .main import UsageError
from .sampling_args import add_sampling_arguments, given
from .startup import serving_lines
from .startup import url as page_url

if TYPE_CHECKING:
    from ..serve.app import App

MAX_BODY = 8 * 1024 * 1024  # kept here too: building the parser must not import FastAPI
KEYS_ENV = "LMCHAT_API_KEYS"

EPILOG = f"""API keys can also come from ${KEYS_ENV} (comma-separated), which keeps them out of the
process list. The default store is sqlite:<data dir>/server-<backend>-<model>.db, one per engine
($LMCHAT_DATA_DIR, default: the user data dir); a session stored by another engine is refused (409).
A request that names no session (chat completions without a session id, Responses with store=false,
interactive session_id -1 with interactive_mode=false) runs on a one-off session held in memory for
its turn only: it writes nothing to the store.
Endpoints (docs/server.md):
  POST /v1/chat/interactive, /v1/chat/completions, /v1/completions;
  GET /v1/models, /v1/sessions[/ID[/export]], /health, /metrics; DELETE /v1/sessions/ID;
  POST /v1/sessions[/ID/fork].
llama-server's: GET /props; POST /tokenize, /detokenize.
OpenAI's Responses and Conversations APIs, for agents (docs/agents.md):
  POST /v1/responses; GET, DELETE /v1/responses/ID; GET /v1/responses/ID/input_items;
  POST /v1/conversations; GET, POST, DELETE /v1/conversations/ID;
  GET /v1/conversations; GET, POST /v1/conversations/ID/items; GET, DELETE /v1/conversations/ID/items/ITEM_ID.
The web chat page (docs/web.md): open http://HOST:PORT/ in a browser, or start with --open."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    add_template_arguments(p, required=False)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    add_backend_arguments(p)
    p.add_argument("--store", metavar="SPEC",
                   help="memory | sqlite:PATH | redis://HOST:PORT/DB (default: an SQLite file per backend and model)")
    p.add_argument("--api-key", action="append", default=[], metavar="KEY",
                   help="accepted Bearer key (repeatable; default: none, no authentication)")
    p.add_argument("--model-name", "--served-model-name", metavar="NAME",
                   help="the model name /v1/models lists; given, a request naming another model is refused (404 "
                        "model_not_found) (default: the template's, and any name a request gives is answered)")
    p.add_argument("--metrics-key", action="append", default=[], metavar="KEY",
                   help="Bearer key /metrics takes (repeatable; default: the API keys; none and no API keys: open)")
    p.add_argument("--replica-name", type=_replica_name, metavar="NAME",
                   help="the name every response gives in its X-Lmchat-Replica header, for replicas behind a load "
                        "balancer (docs/scaling.md; default: HOSTNAME:PORT)")
    limits = p.add_argument_group("limits")
    limits.add_argument("--max-sessions", type=int, default=10_000,
                        help="stored sessions kept in memory (default: 10000; one-off requests' are not counted)")
    limits.add_argument("--max-active", type=int, default=64, help="turns running at once (default: 64)")
    limits.add_argument("--idle-ttl", type=float, metavar="SECONDS",
                        help="evict sessions idle this long from memory (default: never; --max-sessions bounds them)")
    limits.add_argument("--store-ttl", type=float, metavar="SECONDS",
                        help="expire sessions in the store (Redis; default: never)")
    limits.add_argument("--max-body-bytes", type=int, default=MAX_BODY,
                        help=f"request size limit (default: {MAX_BODY})")
    limits.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="a client must send its request headers within this (default: 10)")
    limits.add_argument("--body-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="... and each piece of its body within this (default: 30)")
    limits.add_argument("--shutdown-grace", type=float, default=5.0, metavar="SECONDS",
                        help="on SIGTERM/SIGINT, how long running requests may finish before they are cancelled "
                             "(their partial answers are saved; default: 5)")
    sessions = p.add_argument_group("sessions")
    sessions.add_argument("--session-len", type=int, help="tokens a session may hold (default: the template's)")
    sessions.add_argument("--overflow", choices=OVERFLOW_POLICIES, default="error",
                          help="what a turn that does not fit does (default: error)")
    sessions.add_argument("--drift", choices=DRIFT_POLICIES, default="rewind",
                          help="when the engine's ids of an answer differ from their canonical encoding "
                               "(default: rewind; docs/tokens.md)")
    add_sampling_arguments(p, answer_budget="an answer's budget when a request gives none (max_tokens...)")
    p.add_argument("--open", action="store_true",
                   help="open the web chat page in the browser once the server answers (docs/web.md)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="what the console shows (default: info: the start lines, each request, lmchat's notices)")


def _replica_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", text):
        raise argparse.ArgumentTypeError("a replica name is 1 to 100 letters, digits, '.', '_', ':' or '-'")
    return text


def replica_name(args: argparse.Namespace) -> str:
    """The replica's name in its responses' headers: ``--replica-name``, else this host and port."""
    if args.replica_name:
        return str(args.replica_name)
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:60] or "localhost"
    return f"{host}:{args.port}" if args.port else f"{host}:pid{os.getpid()}"


def default_store_path(engine: str) -> Path:
    """One SQLite file per engine (backend and model): a server never continues another model's sessions."""
    from ..paths import data_dir

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", engine).strip("-")
    if len(slug) > 80:  # long remote URLs: keep the file name short and still unique
        slug = f"{slug[:60]}-{hashlib.sha256(engine.encode()).hexdigest()[:12]}"
    return data_dir() / f"server-{slug}.db"


def open_page(url: str, seconds: float = 60.0) -> threading.Thread:
    """Opens ``url`` in the user's browser (``webbrowser``: $BROWSER, else the desktop's) once ``/health`` answers
    there, from a thread: uvicorn.run, which starts listening, does not return."""

    def wait_then_open() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "health", timeout=2):  # noqa: S310 - our own http:// URL
                    break
            except OSError:
                time.sleep(0.1)
        else:
            logging.getLogger("lmchat.serve").warning("the server did not answer at %s: no page opened", url)
            return
        if not webbrowser.open(url):
            logging.getLogger("lmchat.serve").warning("no browser found: open %s", url)

    thread = threading.Thread(target=wait_then_open, name="lmchat-open-page", daemon=True)
    thread.start()
    return thread


def run(args: argparse.Namespace) -> int:
    from ..extras import needs

    with needs("lmchat serve", "serve"):
        import uvicorn

        from ..serve.timeouts import protocol
    logs.to_console(args.log_level)  # before the backend starts: what it finds in its KV directory is logged
    app = build_app(args)
    log = logging.getLogger("lmchat.serve")
    for line in serving_lines(app.state.manager, app.state.model_name, args.host, args.port):
        log.info("%s", line)
    if args.open and args.port:
        open_page(page_url(args.host, args.port))
    elif args.open:  # port 0: the port is uvicorn's to pick, after this
        log.warning("--open needs a --port: open the address uvicorn names below")
    # what is alive now (modules, templates, the model) lives until exit: keeping it out of every
    # garbage collection shortens the collector's pauses, which land on request latency
    gc.freeze()
    # the app closes the manager when uvicorn shuts down: running turns are cancelled and saved
    logs.to_debug()  # library warnings only with --log-level debug
    # access lines are logged at info: above it, uvicorn would still format their fields for every response
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                access_log=args.log_level in ("info", "debug"),
                timeout_graceful_shutdown=args.shutdown_grace, http=protocol(args.header_timeout))
    return 0


def build_app(args: argparse.Namespace) -> App:
    """The ASGI app ``lmchat serve`` serves for these arguments (backend, template, store, manager), without
    serving it: what a test runs in its own process, or another ASGI server runs."""
    from ..extras import needs

    with needs("lmchat serve", "serve"):
        from ..serve import create_app
    from ..interop.loading import saveable
    from ..manager import ManagerLimits, SessionManager
    from ..registry import as_template, get_template
    from ..stores import open_store

    keys = list(args.api_key) + [k for k in os.environ.get(KEYS_ENV, "").split(",") if k.strip()]
    backend = get_backend(args.backend, **backend_options(args))
    try:
        if args.template or args.chat_template:
            template = saveable(resolve_template(args), args.chat_template or args.template)
        elif isinstance(backend, ModelTemplate) and backend.template_name:
            template = get_template(backend.template_name)
        else:
            raise UsageError(f"the {args.backend} backend does not say which template it needs: "
                             "pass --template NAME or --chat-template FILE")
        defaults = SessionPolicy(session_len=session_len(as_template(template), backend, args.session_len),
                                 overflow=args.overflow, max_new_tokens=args.max_new_tokens or 0, drift=args.drift,
                                 injection=injection_policy(backend, args) or "split")  # 'reject': text upstream
        engine = engine_id(backend)
        store = open_store(args.store or f"sqlite:{default_store_path(engine)}")
        manager = SessionManager(
            backend, template, store, limits=ManagerLimits(max_sessions=args.max_sessions, max_active=args.max_active,
                                                           idle_ttl=args.idle_ttl, store_ttl=args.store_ttl),
            session_defaults=defaults, engine=engine,
            sampling={k: v for k, v in given(args).items() if k != "max_new_tokens"},  # that one: a session's
        )
    except BaseException:
        backend.close()
        raise
    return create_app(manager, api_keys=[k.strip() for k in keys], model_name=args.model_name or template.name,
                      max_body=args.max_body_bytes, close_manager=True, metrics_keys=args.metrics_key,
                      body_timeout=args.body_timeout, strict_model=args.model_name is not None,
                      replica=replica_name(args))
