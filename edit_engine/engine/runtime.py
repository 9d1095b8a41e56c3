"""A loaded model and what the engine's parts share about it: the tokenizer, the checkpoint's sampler settings,
the vocabulary tables, the per-document stores (encoded contexts, syntax trees) and the decoder of its kind."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import torch

from edit_engine.decoding.sampler import SamplerConfig
from edit_engine.engine import decoders
from edit_engine.engine.contexts import ContextCacheConfig, ContextStore, context_ids, doc_key
from edit_engine.engine.drafts import DraftPolicy
from edit_engine.engine.gate import ShowGate
from edit_engine.engine.results import MAX_DOCUMENT_CHARS, TYPED_THROUGH, Pass
from edit_engine.engine.vocab import TokenTables
from edit_engine.memory import Memory
from edit_engine.model.interfaces import CanvasModel, TextTokenizer
from edit_engine.syntax import trees as syntax
from edit_engine.syntax.lru import BoundedLRU

RECENT_DOCUMENTS = 256  # documents whose last insertion is kept for typing through it
RECENT_MAX_BYTES = 32 << 20  # their texts together (``sys.getsizeof``): some sixty 500 k-character documents


def check_text(*texts: str) -> None:
    """ValueError for text the engine cannot take: over ``MAX_DOCUMENT_CHARS`` characters together, or not
    Unicode a tokenizer can encode (a lone surrogate, as JSON's ``"\\ud800"`` decodes to)."""
    n = sum(len(t) for t in texts)
    if n > MAX_DOCUMENT_CHARS:
        raise ValueError(f"document too large ({n:,} > {MAX_DOCUMENT_CHARS:,} chars)")
    for t in texts:
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"text holds a lone surrogate (U+{ord(t[e.start]):04X} at character {e.start}); "
                             "send valid Unicode") from None


class Runtime:
    """One model with its tokenizer, settings, tables, stores and decoder. Thread-safe."""

    def __init__(self, model: CanvasModel, tokenizer: TextTokenizer, sampler: SamplerConfig | None = None,
                 path: Path | None = None, record: dict[str, Any] | None = None,
                 context_cache: ContextCacheConfig | None = None, analysis: bool = False,
                 analysis_ms: float = 10.0) -> None:
        self.model = model
        self.analysis = analysis  # ask a static analyser (Python: jedi) for the names known at the cursor
        self.analysis_ms = analysis_ms  # how long a fill waits for it (a later answer serves the next keystroke)
        # uri -> last insertion (text, start, fill, source)
        self._recent: BoundedLRU[str, tuple[str, int, str, str]] = BoundedLRU(RECENT_DOCUMENTS, RECENT_MAX_BYTES,
                                                                             "recent insertions")
        self.tokenizer = tokenizer
        self.sampler = sampler or SamplerConfig()
        self.path = path
        self.record = record or {}
        self.contexts = ContextStore(context_cache)
        self.tables = TokenTables(model, tokenizer)
        self.decoder = decoders.for_model(model, tokenizer, self.contexts, self.tables)
        self.syntax = syntax.SyntaxCache()
        # The memory of code whose drafts may answer an insert request (``drafts``); None: the model and
        # copies only (``Engine(memory=...)``).
        self.memory: Memory | None = None
        self.draft_policy = DraftPolicy()
        self.gate = ShowGate()  # shows everything until ``Engine.load`` sets the fitted one (``gate``)

    def gated(self, p: Pass, dp: Any, threshold: float | None) -> Pass:
        """The final pass ``p`` of an insert request as shown: itself, or no text with the reason when the show
        gate estimates it less likely to be accepted than ``threshold`` (None: the gate's own)."""
        if not p.text or p.source == "none" or p.reason == TYPED_THROUGH:  # typing agreed with it so far
            return p
        before = dp.text[: p.start]
        shown, est = self.gate.shows(p.text, p.source, p.score, before[before.rfind("\n") + 1 :], threshold)
        if shown:
            return dataclasses.replace(p, estimate=est)
        self.forget(dp.uri)
        why = f"not shown: {est:.0%} likely to be accepted, below the show threshold"
        if sum(not c.isspace() for c in p.text) < self.gate.min_chars:
            why = f"not shown: it writes fewer than {self.gate.min_chars} characters"
        return dataclasses.replace(p, text="", source="none", reason=why, estimate=est)

    @property
    def canvas(self) -> bool:
        """The model denoises a canvas (not the autoregressive baseline): ``Decoder.canvas``."""
        return self.decoder.canvas

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages the model was trained on (None: any). Ours train on Python sources only unless the
        training record lists ``languages``; open checkpoints know many."""
        listed = self.record.get("languages")
        if listed:
            return frozenset(listed)
        return frozenset({"python"}) if getattr(self.model.cfg, "family", "") == "edit-engine" else None

    def knows(self, language: str) -> bool:
        """Whether the model was trained on ``language`` (plain text and unknown grammars count as known)."""
        langs = self.languages
        return langs is None or language in langs or language in ("plaintext", "")

    def remember(self, uri: str | None, text: str, start: int, fill: str, source: str) -> None:
        """Keep a document's last insertion (``fill`` at ``start`` of ``text``) for ``typed_through``."""
        if not uri or not fill:
            return
        self._recent.put(uri, (text, start, fill, source), sys.getsizeof(text) + sys.getsizeof(fill) + 256)

    def forget(self, uri: str | None) -> None:
        """Drop a document's last insertion (it was not shown)."""
        if uri:
            self._recent.pop(uri)

    def typed_through(self, uri: str | None, text: str, offset: int) -> tuple[str, str] | None:
        """(the rest of the last fill, its source) when ``text`` is the document of the last insertion at ``uri``
        with the fill's first characters typed at its place and the cursor after them; else None."""
        if not uri:
            return None
        got = self._recent.peek(uri)
        if got is None:
            return None
        old, start, fill, source = got
        typed = offset - start
        if not 0 < typed < len(fill) or len(text) != len(old) + typed or text[start:offset] != fill[:typed] \
                or not text.startswith(old[:start]) or not text.endswith(old[start:]):
            return None
        return fill[typed:], source

    def config(self, max_tokens: int | None, overrides: dict[str, Any]) -> SamplerConfig:
        """The sampler settings of a call: the checkpoint's, overridden, ``max_tokens`` clamped to the model."""
        if "max_commit" in overrides and "min_commit" not in overrides and overrides["max_commit"]:
            # A ceiling below the checkpoint's floor (sampler.json) lowers the floor with it.
            overrides = {**overrides, "min_commit": min(self.sampler.min_commit, int(overrides["max_commit"]))}
        cfg = self.sampler.with_(**overrides) if overrides else self.sampler
        max_canvas = self.model.cfg.max_canvas
        if max_tokens is not None:
            if max_tokens < 1:
                raise ValueError("max_tokens must be >= 1")
            cfg = cfg.with_(max_tokens=min(max_tokens, max_canvas), initial_canvas=min(cfg.initial_canvas, max_tokens))
        elif cfg.max_tokens > max_canvas:
            cfg = cfg.with_(max_tokens=max_canvas)
        return cfg

    def context_ids(self, prefix: str, suffix: str) -> tuple[list[int], list[int]]:
        """The model's context tokens for a hole (``contexts.context_ids`` within the model's budget)."""
        mc = self.model.cfg
        return context_ids(self.tokenizer, mc.max_prefix, mc.max_suffix, prefix, suffix)

    def key(self, uri: str | None, p_ids: list[int], s_ids: list[int]) -> Hashable:
        return doc_key(uri, p_ids, s_ids)

    def document(self, text: str, language: str, uri: str | None) -> syntax.Document:
        """The syntax tree of a document (kept per ``uri``, so it is re-parsed incrementally)."""
        check_text(text)
        return self.syntax.get(uri, text, language) if uri else syntax.Document.parse(text, language)

    def scores(self, canvas: torch.Tensor, cache: Any) -> torch.Tensor:
        """One scoring pass: the model's probability of each slot's current token. canvas (C,) -> (C,)."""
        logits = self.model.canvas_logits(canvas.reshape(1, -1), cache)[0].float()  # (C, V)
        return torch.softmax(logits, -1).gather(-1, canvas.reshape(-1, 1)).squeeze(-1)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) if text else 0
