"""What the engine needs of a model and a tokenizer, and what a loaded checkpoint is.

Our transformer (``model.DiffusionLM``), the open diffusion coders (``hf.FullAttnLM``) and the autoregressive
baseline (a ``DiffusionLM`` trained with ``objective="ar"``) all satisfy ``CanvasModel``; our BPE tokenizer and
``hf.OpenTokenizer`` satisfy ``TextTokenizer``. The engine is typed against these protocols, so no loader casts
one model kind to another and no caller asks which class it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch


class TextTokenizer(Protocol):
    pad_id: int  # the canvas slot past the end of a fill
    mask_id: int  # an undecided canvas slot
    eos_id: int

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Iterable[int]) -> str: ...


class CanvasModel(Protocol):
    """A denoiser over a canvas beside an encoded context (``model.py``'s module doc has the layout).

    ``exact_context_cache``: the encoded context does not depend on the canvas, so one cache serves every pass
    and may be kept per document and shared by a batch (ours); False for full-attention models whose cache is
    an approximation made per request. ``cfg`` has at least ``vocab_size``, ``max_prefix``, ``max_suffix``,
    ``max_canvas`` and ``objective`` (``"diffusion"`` or ``"ar"``)."""

    cfg: Any
    exact_context_cache: bool

    @property
    def device(self) -> torch.device: ...

    @property
    def int8(self) -> bool: ...

    @property
    def tied_head(self) -> torch.Tensor | None:
        """(V, D): the weight whose product with the hidden states is exactly the logits (a tied, float head),
        so the sampler may take (token, score) from the hidden states; None otherwise."""
        ...

    def parameters(self) -> Iterable[torch.nn.Parameter]: ...

    def encode_context(self, prefixes: list[list[int]], suffixes: list[list[int]], capacity: int, *,
                       at_least: tuple[int, int] = (0, 0)) -> Any: ...

    def canvas_logits(self, canvas: torch.Tensor, cache: Any) -> torch.Tensor: ...

    def canvas_hidden(self, canvas: torch.Tensor, cache: Any) -> torch.Tensor: ...
    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Hidden states (..., D) -> logits (..., V): ``canvas_logits`` is ``head(canvas_hidden(...))``."""
        ...


class CheckpointError(RuntimeError):
    """A checkpoint directory that cannot be used; the message says why."""


@dataclass
class Checkpoint:
    model: Any  # a CanvasModel: our DiffusionLM, or an open model's adapter
    tokenizer: Any  # a TextTokenizer
    path: Path
    record: dict[str, Any]
