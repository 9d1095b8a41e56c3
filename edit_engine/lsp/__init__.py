"""The edit-engine language server (pygls): ``edit-engine lsp`` or ``python -m edit_engine.lsp``.

    from edit_engine.lsp import create_server
    create_server().start_io()

``create_server`` loads on first use, so importing ``edit_engine.lsp.cli`` (the ``edit-engine lsp`` flags) does
not import pygls or torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edit_engine.lsp.settings import Settings

if TYPE_CHECKING:
    from edit_engine.lsp.server import create_server

__all__ = ["Settings", "create_server"]


def __getattr__(name: str) -> Any:
    if name == "create_server":
        from edit_engine.lsp.server import create_server

        return create_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
