"""The edit-engine command: infill, train, and the front ends (eval, bench, serve, lsp) when installed.

Each subcommand lives beside what it drives (``cli.infill``, ``train.cli``, ``eval.cli``, ``cli.bench``,
``serve.cli``, ``lsp.cli``): its ``add_parser(sub)`` adds its flags and sets its handler. The modules are
imported for their argparse code only; their heavy imports (torch models, FastAPI, pygls) happen inside the
handler, so ``edit-engine --help`` starts fast. A subcommand whose module needs a package that is missing (a GPU
machine with torch but not pygls) is left out, and the others still run. Errors a user can cause (missing file,
position outside the file, unreadable model) end with a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from edit_engine.cli.args import UserError

SUBCOMMANDS = ("edit_engine.cli.infill", "edit_engine.train.cli", "edit_engine.eval.cli", "edit_engine.cli.bench",
               "edit_engine.serve.cli", "edit_engine.lsp.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edit-engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("edit_engine"):
                raise
            continue  # a front end whose package is not installed
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return int(a.handler(a))
    except UserError as e:
        print(f"edit-engine: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        from edit_engine.model.interfaces import CheckpointError

        if isinstance(e, CheckpointError):
            print(f"edit-engine: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
