"""The ``lmchat`` command line. Each subcommand is a module with ``add_parser`` and ``run``."""
