"""``python -m edit_engine.lsp``: the same as ``edit-engine lsp``."""

import sys

from edit_engine.cli.main import main

sys.exit(main(["lsp", *sys.argv[1:]]))
