"""Open diffusion checkpoints (Dream, Dream-Coder, DiffuCoder, Open-dCoder, LLaDA) served by the engine.

``edit_engine.model.checkpoint.load`` routes any folder whose ``config.json`` is not edit-engine's own here. The
returned ``Checkpoint`` carries adapters with the interface ``Engine`` already uses (``FullAttnLM``,
``OpenTokenizer``), so ``Engine.load(folder)``, the CLI, the server and the language server work unchanged.
Modules: ``config`` (family detection), ``loader`` (local folder, safetensors), ``fullattn`` (the transformer),
``cache`` (Fast-dLLM-style approximate caching), ``tokenizer``. See docs/open-models.md.
"""

from __future__ import annotations

from pathlib import Path

import torch

from edit_engine.model.hf.cache import CACHE_MODES, ApproxCache, CachePolicy, CacheStats
from edit_engine.model.hf.config import (
    FAMILIES,
    ArchConfig,
    UnsupportedCheckpoint,
    detect_family,
    parse_config,
)
from edit_engine.model.hf.fullattn import FullAttnLM
from edit_engine.model.hf.loader import is_open_checkpoint, load_model, resolve_folder
from edit_engine.model.hf.tokenizer import OpenTokenizer
from edit_engine.model.interfaces import Checkpoint, CheckpointError

__all__ = [
    "CACHE_MODES",
    "FAMILIES",
    "ApproxCache",
    "ArchConfig",
    "CachePolicy",
    "CacheStats",
    "FullAttnLM",
    "OpenTokenizer",
    "UnsupportedCheckpoint",
    "detect_family",
    "is_open_checkpoint",
    "load",
    "load_model",
    "parse_config",
    "resolve_folder",
]


def load(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None,
         cache_mode: str | None = None, refresh_every: int | None = None) -> Checkpoint:
    """Load an open checkpoint folder as an edit-engine ``Checkpoint`` (errors as ``CheckpointError``).

    ``cache_mode``/``refresh_every`` default to ``EDIT_ENGINE_HF_CACHE``/``EDIT_ENGINE_HF_REFRESH``, else
    dual cache refreshed every 4 passes.
    """
    env = CachePolicy.from_env()
    policy = CachePolicy(cache_mode or env.mode, env.refresh_every if refresh_every is None else refresh_every)
    try:
        model, tok, d, record = load_model(path, device, dtype, policy)
    except (UnsupportedCheckpoint, OSError, ValueError) as e:
        raise CheckpointError(str(e) if isinstance(e, UnsupportedCheckpoint) else
                              f"cannot read model in {str(path)!r}: {e}") from e
    # The adapters implement the engine's protocols (``interfaces.CanvasModel``, ``interfaces.TextTokenizer``).
    return Checkpoint(model, tok, d, record)
