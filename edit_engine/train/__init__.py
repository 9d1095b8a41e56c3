"""Training: corpus, infill examples, the diffusion objective, checkpoints and resume.

``TrainConfig`` and ``train`` (``train.loop``) load on first use, so importing ``edit_engine.train.cli`` (the
``edit-engine train`` flags) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edit_engine.train.loop import TrainConfig, train

__all__ = ["TrainConfig", "train"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from edit_engine.train import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
