"""``edit-engine serve``: flags come from ``Settings``; FastAPI and uvicorn are imported only when it runs."""

from __future__ import annotations

import argparse

from ..cli_args import UserError
from .settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="serve the model over websocket (JSON-RPC) and OpenAI-compatible HTTP",
                       description="Flags override EDIT_ENGINE_* environment variables, which override defaults.")
    p.set_defaults(handler=_serve)
    Settings.add_arguments(p)


def settings_from_args(a: argparse.Namespace) -> Settings:
    try:
        s = Settings.resolve(a)
        s.check_bind()
    except ValueError as e:
        raise UserError(str(e)) from e
    return s


def _serve(a: argparse.Namespace) -> int:
    settings = settings_from_args(a)
    import uvicorn

    from .app import create_app, uvicorn_config

    uvicorn.Server(uvicorn_config(create_app(settings), settings)).run()
    return 0
