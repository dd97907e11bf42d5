"""``python -m lmchat`` is the ``lmchat`` command."""
import sys

from .cli.main import main

sys.exit(main())
