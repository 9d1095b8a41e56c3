"""Serving logic shared by the websocket and HTTP front ends: requests in, planned jobs out, limits enforced.

The front ends parse and format; this module turns a parsed request into a ``JobSpec`` (planning the span of a
document request, converting positions once, in the requested encoding), checks the limits, and submits it to
the scheduler. Every failure leaves as a ``ServeError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import positions
from .. import protocol as rpc
from ..engine import Engine, Pass
from .batching import Job, JobSpec, Overloaded, Scheduler
from .errors import ServeError
from .metrics import Metrics
from .protocol import CompletionRequest, InfillParams
from .settings import Settings


@dataclass(frozen=True)
class Planned:
    """A planned request: a batched job (``spec``) or an engine stream (``run``, document requests)."""

    spec: JobSpec | None
    run: Callable[[Callable[[], bool]], Iterator[Pass]] | None = None
    range_of: Callable[[int, int], dict[str, Any]] | None = None  # LSP range of a span (document requests)


class Service:
    """The engine, its scheduler, the metrics and the limits of one server."""

    def __init__(self, settings: Settings, engine: Engine, metrics: Metrics | None = None,
                 before_pass: Callable[[], None] | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self.metrics = metrics or Metrics()
        self.scheduler = Scheduler(engine, self.metrics, settings.max_batch, settings.max_queue, before_pass,
                                   settings.document_workers)

    @property
    def model_name(self) -> str:
        return self.engine.name

    def close(self) -> None:
        self.scheduler.close()

    # ------------------------------------------------------------------ limits
    def _check_document(self, chars: int) -> None:
        if chars > self.settings.max_document_chars:
            raise ServeError("too_large", f"document of {chars:,} characters exceeds the limit of "
                             f"{self.settings.max_document_chars:,}", limit="max_document_chars")

    def _check_max_tokens(self, n: int | None) -> None:
        if n is not None and n > self.settings.max_tokens:
            raise ServeError("too_large", f"maxTokens {n} exceeds the limit of {self.settings.max_tokens}",
                             limit="max_tokens")

    # ------------------------------------------------------------------ planning
    def plan_infill(self, p: InfillParams) -> Planned:
        """A websocket ``editEngine/infill`` request to a job (and the LSP range its text replaces)."""
        self._check_max_tokens(p.maxTokens)
        if p.text is not None:
            return self._plan_document(p)
        if p.prefix is None:
            raise ServeError("invalid_params", "give {prefix, suffix} or {text, position | offset}")
        suffix = p.suffix or ""
        self._check_document(len(p.prefix) + len(suffix))
        return Planned(JobSpec(p.prefix, suffix, p.maxTokens or self._default_max()))

    def _default_max(self) -> int | None:
        return self.settings.max_tokens if self.settings.max_tokens < self.engine.sampler.max_tokens else None

    def _plan_document(self, p: InfillParams) -> Planned:
        """A document request runs ``Engine.stream_complete`` (its planner picks the span); positions are
        converted here, once, in the requested encoding."""
        doc = p.text
        assert doc is not None
        self._check_document(len(doc))
        enc = p.positionEncoding
        starts = positions.line_starts(doc)
        selection = None
        if p.range is not None:
            s = positions.position_to_offset(doc, p.range.start.line, p.range.start.character, enc, starts)
            e = positions.position_to_offset(doc, p.range.end.line, p.range.end.character, enc, starts)
            if e < s:
                raise ServeError("invalid_params", "range ends before it starts")
            selection = (s, e)
        if p.offset is not None:
            if p.offset > len(doc):
                raise ServeError("invalid_params", f"offset {p.offset} is past the end of the text ({len(doc)})")
            offset = p.offset
        elif p.position is not None:
            offset = positions.position_to_offset(doc, p.position.line, p.position.character, enc, starts)
        elif selection is not None:
            offset = selection[0]
        else:
            raise ServeError("invalid_params", "a text request needs position, offset or range")
        max_tokens = p.maxTokens or self._default_max()
        engine, language = self.engine, p.languageId

        def run(should_stop: Callable[[], bool]) -> Iterator[Pass]:
            return engine.stream_complete(doc, offset, language=language, selection=selection,
                                          max_tokens=max_tokens, should_stop=should_stop)

        def range_of(start: int, end: int) -> dict[str, Any]:
            return rpc.lsp_range(positions.offset_to_position(doc, start, enc, starts),
                                 positions.offset_to_position(doc, end, enc, starts))

        return Planned(None, run, range_of)

    def plan_completion(self, r: CompletionRequest, stable: bool) -> JobSpec:
        """An OpenAI completion request (prompt = prefix, suffix) to a job."""
        try:
            prompt = r.prompt_text()
        except ValueError as e:
            raise ServeError("invalid_params", str(e)) from e
        suffix = r.suffix or ""
        self._check_document(len(prompt) + len(suffix))
        self._check_max_tokens(r.max_tokens)
        overrides: dict[str, Any] = {}
        if r.temperature is not None:
            overrides["temperature"] = r.temperature
        return JobSpec(prompt, suffix, r.max_tokens or self._default_max(), seed=r.seed or 0,
                       overrides=overrides, stable=stable)

    # ------------------------------------------------------------------ running
    async def start(self, planned: Planned | JobSpec) -> Job:
        """Queue a job; tokenization runs off the event loop."""
        loop = asyncio.get_running_loop()
        if isinstance(planned, JobSpec):
            planned = Planned(planned)
        try:
            if planned.run is not None:
                return self.scheduler.submit_stream(planned.run, loop)
            assert planned.spec is not None
            if not getattr(self.engine.model, "exact_context_cache", True):
                # Open full-attention models (edit_engine/hf): one approximate cache per request, no shared batch.
                spec, eng = planned.spec, self.engine

                def run(should_stop: Callable[[], bool]) -> Iterator[Pass]:
                    for p, _t in eng._run(spec.prefix, spec.suffix, spec.max_tokens, spec.seed, should_stop,
                                          dict(spec.overrides), spec.single_line, spec.initial_canvas):
                        yield p

                return self.scheduler.submit_stream(run, loop)
            return await asyncio.to_thread(self.scheduler.submit, planned.spec, loop)
        except Overloaded as e:
            raise ServeError("overloaded", str(e), limit=e.limit, retry_after=self.settings.retry_after_s) from e
        except ValueError as e:
            raise ServeError("invalid_params", str(e)) from e

    def count_tokens(self, text: str) -> int:
        return len(self.engine.tokenizer.encode(text)) if text else 0
