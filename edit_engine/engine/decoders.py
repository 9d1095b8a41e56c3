"""How each kind of model turns a hole into passes, behind one small protocol.

``DiffusionDecoder`` (ours and the open diffusion coders): the context encoded once (kept per document where
the model's cache is exact), then ``sampler.denoise``. ``ARDecoder`` (the autoregressive baseline,
``edit_engine/decoding/ar.py``): one pass per generated token over a key/value cache kept per document the same way.
Both yield ``sampler.Step``s, so the engine streams them alike. ``canvas`` says whether the decoder works on a
canvas of masks: only then do token healing, slot-0 tables, the model's choice of indentation, rewrite mode,
repair rounds and the server's batched scheduler apply.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import Protocol

import torch

from edit_engine.decoding import ar
from edit_engine.decoding.sampler import SamplerConfig, Step, denoise
from edit_engine.engine.contexts import ContextStore
from edit_engine.engine.vocab import TokenTables
from edit_engine.model.interfaces import CanvasModel, TextTokenizer


class Decoder(Protocol):
    canvas: bool  # denoises a canvas of masks (healing, slot-0 tables, rewrite, repair, batching apply)

    def steps(self, p_ids: list[int], s_ids: list[int], cfg: SamplerConfig, key: Hashable, seed: int = 0,
              should_stop: Callable[[], bool] | None = None, first: torch.Tensor | None = None,
              bias: torch.Tensor | None = None) -> contextlib.AbstractContextManager[Iterator[Step]]:
        """The passes of filling the hole between ``p_ids`` and ``s_ids``, inside a ``with`` block that owns
        the document's cached context (``key``) while it runs."""
        ...


class _Parts:
    """What every decoder holds: the model, its tokenizer, the context store and the vocabulary tables."""

    def __init__(self, model: CanvasModel, tokenizer: TextTokenizer, contexts: ContextStore,
                 tables: TokenTables) -> None:
        self.model, self.tokenizer, self.contexts, self.tables = model, tokenizer, contexts, tables


class DiffusionDecoder(_Parts):
    canvas = True

    @contextlib.contextmanager
    def steps(self, p_ids: list[int], s_ids: list[int], cfg: SamplerConfig, key: Hashable, seed: int = 0,
              should_stop: Callable[[], bool] | None = None, first: torch.Tensor | None = None,
              bias: torch.Tensor | None = None) -> Iterator[Iterator[Step]]:
        tok = self.tokenizer
        with self.contexts.encoded(self.model, key, p_ids, s_ids, cfg.max_tokens) as cache:
            yield denoise(self.model, cache, cfg, tok.pad_id, tok.mask_id, seed, should_stop,  # type: ignore[arg-type]
                          line_end=self.tables.line_end_for(cfg), first=first, bias=bias)


class ARDecoder(_Parts):
    canvas = False

    @contextlib.contextmanager
    def steps(self, p_ids: list[int], s_ids: list[int], cfg: SamplerConfig, key: Hashable, seed: int = 0,
              should_stop: Callable[[], bool] | None = None, first: torch.Tensor | None = None,
              bias: torch.Tensor | None = None) -> Iterator[Iterator[Step]]:
        tok = self.tokenizer
        with self.contexts.kv(self.model, key, ar.psm_prompt(tok, p_ids, s_ids)) as kv:  # type: ignore[arg-type]
            yield ar.ar_generate(self.model, tok, p_ids, s_ids, cfg.max_tokens, should_stop,  # type: ignore[arg-type]
                                 min_tokens=cfg.min_tokens, kv=kv, line_end=self.tables.line_end_for(cfg),
                                 bias=bias)


def for_model(model: CanvasModel, tokenizer: TextTokenizer, contexts: ContextStore,
              tables: TokenTables) -> Decoder:
    """The decoder of a model kind: autoregressive for ``cfg.objective == "ar"`` checkpoints, else diffusion."""
    kind = ARDecoder if getattr(model.cfg, "objective", "diffusion") == "ar" else DiffusionDecoder
    return kind(model, tokenizer, contexts, tables)
