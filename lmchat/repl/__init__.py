"""``lmchat chat``: an interactive session with a backend, saved after every turn.

Modules: :mod:`.conversation` (the session, backend and store of one chat, and
its turns), :mod:`.streaming` (running a generation, Ctrl-C cancels),
:mod:`.commands` (the slash
commands), :mod:`.rendering` (plain and rich output), :mod:`.toolbar`,
:mod:`.history` (where files live) and :mod:`.app` (the terminal and plain
loops).
"""
