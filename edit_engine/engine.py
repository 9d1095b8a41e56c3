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
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import checkpoint, planner, positions, postprocess, repair, syntax
from .model import ContextCache, DiffusionLM
from .sampler import SamplerConfig, Step, denoise
from .tokenizer import Tokenizer, trim_end, trim_start

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
    masked: int  # undecided slots (masked, or not yet opened by growth); never rises within a repair round
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
        pre, suf = prefix[-8 * mc.max_prefix :], suffix[: 8 * mc.max_suffix]
        tok = self.tokenizer
        # Same trimming as training (a token budget must not cut a character in two).
        p = trim_start(tok, pre, tok.encode(pre)[-mc.max_prefix :])
        s = trim_end(tok, suf, tok.encode(suf)[: mc.max_suffix])
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
        runs = deque(self._run(prefix, suffix, max_tokens, seed, None, overrides, single_line=False), maxlen=1)
        p, t = runs[0]
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
                        should_stop: Callable[[], bool] | None = None, mode: str = "insert", repair: bool = True,
                        uri: str | None = None, **overrides: Any) -> Iterator[Pass]:
        """Plan the span at ``offset`` (or rewrite ``selection``) and yield every pass as an edit.

        ``mode="rewrite"`` (with a selection) starts from the selection's tokens and re-denoises the least likely
        ones. ``repair`` re-masks what a fill broke in the parse and runs more passes (streamed too). ``uri`` keeps
        the document's syntax tree between requests so it is re-parsed incrementally.
        """
        for p, _ in self._complete_passes(text, offset, language, selection, max_tokens, seed, should_stop,
                                          overrides, mode, repair, uri):
            yield p

    def complete(self, text: str, offset: int, language: str = "python",
                 selection: tuple[int, int] | None = None, max_tokens: int | None = None, seed: int = 0,
                 mode: str = "insert", repair: bool = True, uri: str | None = None, **overrides: Any) -> Completion:
        """The edit for a cursor (or a selection): ``text`` replaces ``document[start:end]``."""
        last = None
        for item in self._complete_passes(text, offset, language, selection, max_tokens, seed, None, overrides,
                                          mode, repair, uri):
            last = item
        assert last is not None
        p, (pl, t) = last
        return Completion(p.text, p.index + 1, p.nfe, t["total"], p.stop_reason, self._count(p.text), t,
                          pl.start, pl.end, pl.kind)

    @property
    def syntax_cache(self) -> syntax.SyntaxCache:
        """Syntax trees of the documents seen with a ``uri`` (front ends may also ``edit``/``close`` them)."""
        with self._lock:
            cache = getattr(self, "_syntax", None)
            if cache is None:
                cache = self._syntax = syntax.SyntaxCache()
            return cache

    def _document(self, text: str, language: str, uri: str | None) -> syntax.Document:
        if len(text) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"document too large ({len(text):,} > {MAX_DOCUMENT_CHARS:,} chars)")
        return self.syntax_cache.get(uri, text, language) if uri else syntax.Document.parse(text, language)

    def _plan(self, text: str, offset: int, selection: tuple[int, int] | None,
              max_tokens: int | None, language: str = "plaintext",
              doc: syntax.Document | None = None) -> tuple[planner.Plan, float]:
        if len(text) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"document too large ({len(text):,} > {MAX_DOCUMENT_CHARS:,} chars)")
        t0 = time.perf_counter()
        pl = planner.plan(text, offset, selection, max_tokens, language, doc)
        return pl, (time.perf_counter() - t0) * 1e3

    def _scores(self, canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:
        """One scoring pass: the model's probability of each slot's current token. canvas (C,) -> (C,)."""
        logits = self.model.canvas_logits(canvas.reshape(1, -1), cache)[0].float()  # (C, V)
        return torch.softmax(logits, -1).gather(-1, canvas.reshape(-1, 1)).squeeze(-1)

    def _complete_passes(self, text: str, offset: int, language: str, selection: tuple[int, int] | None,
                         max_tokens: int | None, seed: int, should_stop: Callable[[], bool] | None,
                         overrides: dict[str, Any], mode: str, do_repair: bool, uri: str | None,
                         ) -> Iterator[tuple[Pass, tuple[planner.Plan, dict[str, float]]]]:
        """Plan, denoise, post-process, check and repair; yields every pass with (plan, timings so far)."""
        if mode not in ("insert", "rewrite"):
            raise ValueError(f"mode={mode!r}; expected 'insert' or 'rewrite'")
        t0 = time.perf_counter()
        doc = self._document(text, language, uri)
        t1 = time.perf_counter()
        pl, plan_ms = self._plan(text, offset, selection, max_tokens, language, doc)
        timings: dict[str, float] = {"parse": (t1 - t0) * 1e3, "plan": plan_ms, "repair": 0.0}
        prefix, suffix = text[: pl.start], text[pl.end :]
        cfg = self._config(pl.max_tokens, overrides)
        cfg = cfg.with_(initial_canvas=max(1, min(pl.initial_canvas, cfg.max_tokens)))
        tok, g = self.tokenizer, doc.grammar
        t2 = time.perf_counter()
        p_ids, s_ids = self._context(prefix, suffix)
        t3 = time.perf_counter()
        cache = self.model.encode_context([p_ids], [s_ids], capacity=cfg.max_tokens)
        t4 = time.perf_counter()
        timings.update(tokenize=(t3 - t2) * 1e3, context=(t4 - t3) * 1e3)
        near = prefix[-2000:]

        def finish(canvas: torch.Tensor) -> tuple[str, str]:
            raw = tok.decode(canvas.tolist())
            model_unit = postprocess.detect_indent(near + raw, pl.unit or g.indent)
            return raw, postprocess.finish(raw, pl, suffix, g, model_unit, near)

        def stamp() -> dict[str, float]:
            timings["total"] = (time.perf_counter() - t0) * 1e3
            return dict(timings)

        init, nfe = None, 0
        if mode == "rewrite" and pl.kind == "selection":
            ids = tok.encode(text[pl.start : pl.end])
            if 0 < len(ids) < cfg.max_tokens:
                extra = min(cfg.max_tokens - len(ids), max(2, len(ids) // 8))  # room to grow or end early
                canvas = torch.tensor(ids + [tok.mask_id] * extra, device=self.model.device)
                conf = self._scores(torch.tensor(ids, device=self.model.device), cache)
                nfe += 1
                redo = repair.least_likely(conf, torch.ones_like(conf, dtype=torch.bool), REWRITE_SHARE)
                canvas[: len(ids)][redo] = tok.mask_id
                init = canvas
        index, rounds, best = 0, 0, None
        stop_reason = "complete"
        t_round = time.perf_counter()
        while True:
            last: Step | None = None
            fill = ""
            for step in denoise(self.model, cache, cfg, tok.pad_id, tok.mask_id, seed, should_stop, init):
                if last is not None:  # hold each pass back one step: only the very last one is final
                    yield Pass(index, fill, last.masked, False, nfe + last.nfe, pl.start, pl.end), (pl, stamp())
                    index += 1
                last = step
                _, fill = finish(step.tokens)
            if last is None or not last.final:  # cancelled
                return
            nfe += last.nfe
            stop_reason = last.stop_reason or stop_reason
            key = "denoise" if rounds == 0 else "repair"
            timings[key] = timings.get(key, 0.0) + (time.perf_counter() - t_round) * 1e3
            tp = time.perf_counter()
            found = repair.check(doc, pl.start, pl.end, fill) if pl.check and do_repair else None
            timings["parse"] += (time.perf_counter() - tp) * 1e3
            if best is None or found is not None and found.errors < best[1]:
                best = (fill, found.errors if found is not None else 0)
            if found is None or found.errors == 0 or rounds >= repair.MAX_ROUNDS \
                    or (should_stop is not None and should_stop()):
                break
            yield Pass(index, fill, 0, False, nfe, pl.start, pl.end), (pl, stamp())
            index += 1
            t_round = time.perf_counter()
            canvas = last.tokens
            real = (canvas != tok.pad_id) & (canvas != tok.mask_id)
            conf = self._scores(canvas, cache)
            nfe += 1
            pieces = [tok.decode([int(t)]) if bool(r) else "" for t, r in zip(canvas.tolist(), real.tolist(),
                                                                               strict=True)]
            raw, _ = finish(canvas)
            spans = repair.slot_spans(pieces) if "".join(pieces) == raw else _prefix_spans(tok, canvas, real)
            init = repair.remask(canvas, conf, spans, repair.to_raw(found.ranges, raw, fill), found.elsewhere,
                                 real, tok.mask_id)
            rounds += 1
        yield Pass(index, best[0], 0, True, nfe, pl.start, pl.end, stop_reason), (pl, stamp())


REWRITE_SHARE = 0.25  # rewrite mode re-masks this share of the selection's tokens (the least likely)


def _prefix_spans(tok: Tokenizer, canvas: torch.Tensor, real: torch.Tensor) -> list[tuple[int, int]]:
    """Character range of each slot in the decoded canvas, by decoding growing prefixes (a token may hold part
    of a multi-byte character, so decoding tokens one by one does not add up)."""
    ids = canvas.tolist()
    spans, prev = [], 0
    for j in range(len(ids)):
        n = len(tok.decode(ids[: j + 1])) if bool(real[j]) else prev
        spans.append((prev, n))
        prev = n
    return spans
