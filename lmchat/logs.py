"""Library chatter (Python warnings, transformers' and llama.cpp's logs) kept off the chat screen.

``lmchat chat`` owns the terminal: warnings such as transformers'
``FutureWarning`` would be printed into the conversation. They go to the debug
log instead (``<data dir>/debug.log``); ``lmchat serve`` logs them at debug
level, shown with ``--log-level debug``.
"""
from __future__ import annotations

import logging
from pathlib import Path

#: loggers whose records are library chatter, not lmchat's own messages
LIBRARY_LOGGERS = ("py.warnings", "transformers", "torch", "accelerate", "llama_cpp", "lmchat.engine")


def to_file(path: Path) -> Path:
    """Send warnings and library logs to ``path`` (appended); returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    _route(handler, logging.INFO)
    return path


def to_console(level: str) -> None:
    """lmchat's own records at ``level`` and above on stderr, beside uvicorn's lines (a server's console:
    ``--log-level``); without it they had no handler, and nothing below a warning was ever shown."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s: %(name)s: %(message)s"))
    logger = logging.getLogger("lmchat")
    logger.handlers = [handler]
    logger.setLevel(level.upper())


def to_debug(logger: str = "lmchat.serve") -> None:
    """Log warnings and library records under ``logger`` at debug level (a server's console)."""
    target = logging.getLogger(logger)

    class _Demote(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            target.debug("%s: %s", record.name, record.getMessage())

    _route(_Demote(), logging.DEBUG)


def _route(handler: logging.Handler, level: int) -> None:
    logging.captureWarnings(True)
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level)
        logger.propagate = False


def quiet_transformers_handler() -> None:
    """transformers prints through a stderr handler of its own: route its records like the others."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_default_handler()
    library = logging.getLogger("transformers")
    if not library.handlers:  # nothing routed (a library user): keep transformers' own behaviour
        hf_logging.enable_default_handler()
