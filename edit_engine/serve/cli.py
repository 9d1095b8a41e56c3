"""``edit-engine serve``: flags come from ``Settings``; FastAPI and uvicorn are imported only when it runs, Ray
only with ``--ray`` (``ray_app.launch``)."""

from __future__ import annotations

import argparse

from edit_engine.cli.args import UserError
from edit_engine.serve.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="serve the model over websocket (JSON-RPC) and OpenAI-compatible HTTP",
                       description="Flags override EDIT_ENGINE_* environment variables, which override defaults.")
    p.set_defaults(handler=_serve)
    p.add_argument("--ray", action="store_true", help=(
        "serve on Ray Serve: the same API in front of --replicas (or --autoscale MIN:MAX) model replicas, on a "
        "local Ray instance or the cluster at --address (pip install 'edit-engine[ray]'; docs/ray.md)"))
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
    if getattr(a, "ray", False):
        return _serve_ray(settings)
    import uvicorn

    from edit_engine.serve.app import create_app, uvicorn_config

    uvicorn.Server(uvicorn_config(create_app(settings), settings)).run()
    return 0


def _serve_ray(settings: Settings) -> int:
    from edit_engine.serve.ray_app import options

    try:
        options.check(settings)
        import ray.serve  # noqa: F401

        from edit_engine.serve.ray_app.launch import run
    except ValueError as e:
        raise UserError(str(e)) from e
    except ImportError as e:
        raise UserError(f"--ray needs Ray Serve ({e}): pip install 'edit-engine[ray]'") from e
    return run(settings)
