"""The test suite. This runs before any test module or lmchat itself is imported (pytest imports the package
before tests/conftest.py), so it is where the run decides where compiled modules go.

Where the environment forbids writing bytecode beside the sources (``PYTHONDONTWRITEBYTECODE``, set on some
machines to keep checkouts clean), every pytest worker and every ``lmchat serve`` process a test starts would
compile lmchat (an editable install, so pip compiled nothing) and re-run pytest's assertion rewriting from
source, every run: about 5 s of each worker's collection here. The compiled files go to lmchat's cache folder
instead (``sys.pycache_prefix``, ``PYTHONPYCACHEPREFIX`` for the processes the tests start), outside the
checkout, which is what the variable asked for. ``LMCHAT_TEST_PYCACHE=off`` keeps the environment's choice.
"""
import os
import sys

if sys.dont_write_bytecode and os.environ.get("LMCHAT_TEST_PYCACHE") != "off":
    _cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or os.path.join(_cache, "lmchat", "pycache")
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
