"""The one engine API every front end calls: ``Engine.load``, ``infill``, ``stream``, ``complete``,
``stream_complete``.

``infill``/``stream`` take the text before and after a hole. ``complete``/``stream_complete`` take a whole
document and a cursor or selection, let the planner choose the span, and return an edit (range + text).
Streams yield a ``Pass`` after every denoising pass: the whole span as it stands (committed tokens; slots still
masked are left out), so a front end can show it and replace it with the next one. The last pass has
``final=True`` and equals the result. Closing a stream (or ``should_stop()`` returning True) stops the work
before the next forward pass.

No model math here: tokens in, sampler, tokens out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import checkpoint, planner, positions
from .model import DiffusionLM
from .sampler import SamplerConfig, Step, denoise
from .tokenizer import Tokenizer

LANGUAGES_BY_SUFFIX = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".rs": "rust", ".go": "go", ".java": "java", ".c": "c", ".h": "c", ".cpp": "cpp", ".rb": "ruby",
}
MAX_DOCUMENT_CHARS = 5_000_000


def language_for_path(path: str | Path) -> str:
    return LANGUAGES_BY_SUFFIX.get(Path(path).suffix.lower(), "plaintext")


@dataclass(frozen=True)
class Pass:
    """One refinement pass of a stream."""

    index: int  # 0-based
    text: str  # the whole span as it stands (committed tokens only)
    masked: int  # canvas slots still masked
    final: bool
    nfe: int  # forward passes so far
    start: int = 0  # character offsets of the span in the document (complete/stream_complete)
    end: int = 0
    stop_reason: str = ""  # on the final pass: complete | length


@dataclass(frozen=True)
class InfillResult:
    text: str
    passes: int  # refinement passes streamed
    nfe: int  # forward passes of the denoiser
    elapsed_ms: float
    stop_reason: str  # complete (the model ended the fill) | length (max_tokens reached) | cancelled
    tokens: int = 0  # real tokens in the fill
    timings: dict[str, float] = field(default_factory=dict)  # ms per stage


@dataclass(frozen=True)
class Completion(InfillResult):
    start: int = 0  # character offsets: ``text`` replaces document[start:end]
    end: int = 0
    kind: str = ""  # the planner's span kind

    def to_json(self, document: str) -> dict[str, Any]:
        sl, sc = positions.line_col_of_offset(document, self.start)
        el, ec = positions.line_col_of_offset(document, self.end)
        return {
            "text": self.text, "start": {"line": sl, "col": sc}, "end": {"line": el, "col": ec},
            "kind": self.kind, "passes": self.passes, "nfe": self.nfe, "elapsed_ms": round(self.elapsed_ms, 2),
            "stop_reason": self.stop_reason, "tokens": self.tokens,
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
        }


class Engine:
    """A loaded model plus its sampler settings. Thread-safe: each request has its own state."""

    def __init__(self, model: DiffusionLM, tokenizer: Tokenizer, sampler: SamplerConfig | None = None,
                 path: Path | None = None, record: dict[str, Any] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.sampler = sampler or SamplerConfig()
        self.path = path
        self.record = record or {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path | None = None, *, device: str | None = None, threads: int | None = None,
             sampler: SamplerConfig | None = None) -> Engine:
        """Load a checkpoint directory (default: the model packaged with edit-engine)."""
        if threads:
            torch.set_num_threads(threads)
        dev = device or "cpu"
        ck = checkpoint.load(path, device=dev)
        return cls(ck.model, ck.tokenizer, sampler, ck.path, ck.record)

    @property
    def name(self) -> str:
        return self.path.name if self.path else "edit-engine"

    # ------------------------------------------------------------------ hole in, text out
    def _config(self, max_tokens: int | None, overrides: dict[str, Any]) -> SamplerConfig:
        cfg = self.sampler.with_(**overrides) if overrides else self.sampler
        if max_tokens is not None:
            if max_tokens < 1:
                raise ValueError("max_tokens must be >= 1")
            cfg = cfg.with_(max_tokens=min(max_tokens, self.model.cfg.max_canvas),
                            initial_canvas=min(cfg.initial_canvas, max_tokens))
        elif cfg.max_tokens > self.model.cfg.max_canvas:
            cfg = cfg.with_(max_tokens=self.model.cfg.max_canvas)
        return cfg

    def _context(self, prefix: str, suffix: str) -> tuple[list[int], list[int]]:
        """Token ids of the nearest context: the end of the prefix, the start of the suffix."""
        mc = self.model.cfg
        # Cut in characters first (a token is at least one character), then in tokens.
        p = self.tokenizer.encode(prefix[-8 * mc.max_prefix :])[-mc.max_prefix :]
        s = self.tokenizer.encode(suffix[: 8 * mc.max_suffix])[: mc.max_suffix]
        return p, s

    def _text(self, step: Step) -> str:
        return self.tokenizer.decode(step.tokens.tolist())

    def stream(self, prefix: str, suffix: str = "", language: str = "python", max_tokens: int | None = None,
               seed: int = 0, should_stop: Callable[[], bool] | None = None, **overrides: Any) -> Iterator[Pass]:
        """Yield every pass of filling the hole between ``prefix`` and ``suffix``."""
        for p, _ in self._run(prefix, suffix, max_tokens, seed, should_stop, overrides, single_line=False):
            yield p

    def infill(self, prefix: str, suffix: str = "", language: str = "python", max_tokens: int | None = None,
               seed: int = 0, **overrides: Any) -> InfillResult:
        """Fill the hole between ``prefix`` and ``suffix``; returns the final text and counters."""
        last: tuple[Pass, dict[str, float]] | None = None
        for last in self._run(prefix, suffix, max_tokens, seed, None, overrides, single_line=False):
            pass
        assert last is not None
        p, t = last
        return InfillResult(p.text, p.index + 1, p.nfe, t["total"], p.stop_reason,
                            self._count(p.text), t)

    def _count(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) if text else 0

    def _run(self, prefix: str, suffix: str, max_tokens: int | None, seed: int,
             should_stop: Callable[[], bool] | None, overrides: dict[str, Any], single_line: bool,
             initial_canvas: int | None = None, start: int = 0, end: int = 0,
             ) -> Iterator[tuple[Pass, dict[str, float]]]:
        if len(prefix) + len(suffix) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"document too large ({len(prefix) + len(suffix):,} > {MAX_DOCUMENT_CHARS:,} chars)")
        t0 = time.perf_counter()
        cfg = self._config(max_tokens, overrides)
        if initial_canvas is not None:
            cfg = cfg.with_(initial_canvas=max(1, min(initial_canvas, cfg.max_tokens)))
        p_ids, s_ids = self._context(prefix, suffix)
        t1 = time.perf_counter()
        tok = self.tokenizer
        cache = self.model.encode_context([p_ids], [s_ids], capacity=cfg.max_tokens)
        t2 = time.perf_counter()
        timings = {"tokenize": (t1 - t0) * 1e3, "context": (t2 - t1) * 1e3}
        for step in denoise(self.model, cache, cfg, tok.pad_id, tok.mask_id, seed, should_stop):
            text = self._text(step)
            if single_line:
                nl = text.find("\n")
                if nl >= 0:
                    text = text[:nl]
            now = time.perf_counter()
            timings["denoise"] = (now - t2) * 1e3
            timings["total"] = (now - t0) * 1e3
            yield Pass(step.index, text, step.masked, step.final, step.nfe, start, end, step.stop_reason), timings

    # ------------------------------------------------------------------ document + cursor in, edit out
    def stream_complete(self, text: str, offset: int, language: str = "python",
                        selection: tuple[int, int] | None = None, max_tokens: int | None = None, seed: int = 0,
                        should_stop: Callable[[], bool] | None = None, **overrides: Any) -> Iterator[Pass]:
        """Plan the span at ``offset`` (or rewrite ``selection``) and yield every pass as an edit."""
        pl, _ = self._plan(text, offset, selection, max_tokens)
        for p, _t in self._run(text[: pl.start], text[pl.end :], pl.max_tokens, seed, should_stop, overrides,
                               pl.single_line, pl.initial_canvas, pl.start, pl.end):
            yield p

    def complete(self, text: str, offset: int, language: str = "python",
                 selection: tuple[int, int] | None = None, max_tokens: int | None = None, seed: int = 0,
                 **overrides: Any) -> Completion:
        """The edit for a cursor (or a selection): ``text`` replaces ``document[start:end]``."""
        pl, plan_ms = self._plan(text, offset, selection, max_tokens)
        last = None
        for last in self._run(text[: pl.start], text[pl.end :], pl.max_tokens, seed, None, overrides,
                              pl.single_line, pl.initial_canvas, pl.start, pl.end):
            pass
        assert last is not None
        p, t = last
        t = {**t, "plan": plan_ms, "total": t["total"] + plan_ms}
        return Completion(p.text, p.index + 1, p.nfe, t["total"], p.stop_reason, self._count(p.text), t,
                          pl.start, pl.end, pl.kind)

    def _plan(self, text: str, offset: int, selection: tuple[int, int] | None,
              max_tokens: int | None) -> tuple[planner.Plan, float]:
        if len(text) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"document too large ({len(text):,} > {MAX_DOCUMENT_CHARS:,} chars)")
        t0 = time.perf_counter()
        pl = planner.plan(text, offset, selection, max_tokens)
        return pl, (time.perf_counter() - t0) * 1e3
