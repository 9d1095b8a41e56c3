"""The model that writes next edits: an edit-trained checkpoint (``train.edits``), loaded on first use.

``EditModel.for_load`` picks the folder ``Engine.load`` attaches: the one given, else the edit model packaged
beside the packaged fill model (``checkpoint.EDIT_DIR``, when there is one and the fill model is the packaged
one), else none. ``runtime`` answers the fill model's runtime when there is no edit model.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from edit_engine.decoding.sampler import SamplerConfig
from edit_engine.engine.runtime import Runtime
from edit_engine.model import checkpoint


class EditModel:
    """An edit model's folder (None: none), loaded once, on the first next edit that uses a model."""

    def __init__(self, path: Path | None = None, dtype: torch.dtype | str | None = None, device: str = "cpu") -> None:
        self.path = path
        self.dtype, self.device = dtype, device  # loaded as the fill model was
        self._rt: Runtime | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_load(cls, edit_model: str | Path | None | bool, fill_path: str | Path | None,
                 dtype: torch.dtype | str | None, device: str) -> EditModel:
        """``edit_model`` None: the packaged edit model beside the packaged fill model (``fill_path`` None), if
        packaged; False: none; a folder: that one."""
        if edit_model is None:
            edit_model = checkpoint.EDIT_DIR if fill_path is None and checkpoint.EDIT_DIR.is_dir() else False
        path = Path(edit_model) if not isinstance(edit_model, bool) else None
        return cls(path, dtype, device)

    def runtime(self, fill: Runtime, use_model: bool) -> Runtime:
        """The runtime whose model writes next edits: the edit model's when there is one and ``use_model``,
        else ``fill``."""
        if not use_model or self.path is None:
            return fill
        with self._lock:
            if self._rt is None:
                ck = checkpoint.load(self.path, device=self.device, dtype=self.dtype)
                self._rt = Runtime(ck.model, ck.tokenizer, SamplerConfig.for_checkpoint(ck.path), ck.path, ck.record)
            return self._rt
