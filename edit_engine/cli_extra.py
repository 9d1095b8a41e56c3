"""Subcommands that live beside their front end: each module has ``add_parser(sub)`` and registers its handler
with ``edit_engine.cli._command``. Modules are imported for their argparse code only; their heavy imports
(FastAPI, pygls) happen inside the handler, so ``edit-engine infill`` starts fast."""

from __future__ import annotations

import importlib

from .cli import register

MODULES = ("edit_engine.eval.cli", "edit_engine.bench_cli", "edit_engine.serve.cli", "edit_engine.lsp.cli")
# Front ends left out because a package they import is missing (module -> package), e.g. a GPU machine that has
# torch but not pygls: ``edit-engine train`` must still run there.
UNAVAILABLE: dict[str, str] = {}

for _name in MODULES:
    try:
        _mod = importlib.import_module(_name)
    except ModuleNotFoundError as _e:
        UNAVAILABLE[_name] = _e.name or "?"
        continue
    register(_mod.add_parser)
