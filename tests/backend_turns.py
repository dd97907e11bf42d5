"""A turn as production takes it, for the tests that drive a backend directly: prompt, generate, then commit
through :func:`lmchat.session.edits.commit_generation` (an answer cut short is held without an end marker) and
:func:`lmchat.turns.turn.after_commit` (what the turn tells a backend that keeps a prefix cache) -- the path of
the REPL and the session manager, so no test asserts a state they never reach."""
from __future__ import annotations

from lmchat.session.edits import Generation, commit_generation
from lmchat.turns.turn import after_commit


def commit(backend, session, chunks) -> None:
    """Commit the streamed ``chunks`` of one turn of ``session`` on ``backend``."""
    last = chunks[-1]
    commit_generation(session, Generation("".join(c.text for c in chunks),
                                          tuple(i for c in chunks for i in c.token_ids),
                                          last.finish_reason, last.stop))
    after_commit(backend, session.session_id, session, tools_called=False)
