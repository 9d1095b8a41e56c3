"""``python -m edit_engine.cli``: the ``edit-engine`` command."""

import sys

from edit_engine.cli.main import main

sys.exit(main())
