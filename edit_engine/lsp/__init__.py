"""The edit-engine language server (pygls): ``edit-engine lsp`` or ``python -m edit_engine.lsp``.

    from edit_engine.lsp import create_server
    create_server().start_io()
"""

from __future__ import annotations

from .server import create_server
from .settings import Settings

__all__ = ["Settings", "create_server"]
