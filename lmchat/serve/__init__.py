"""``lmchat serve``: sessions over HTTP (LMDeploy's interactive protocol and OpenAI's API).

See ``docs/server.md``. Needs the ``serve`` extra (FastAPI, uvicorn); nothing
else in lmchat imports this package.
"""
from .app import create_app

__all__ = ["create_app"]
