"""Training: corpus, infill examples, the diffusion objective, checkpoints and resume."""

from .loop import TrainConfig, train

__all__ = ["TrainConfig", "train"]
