"""Serving logic shared by the websocket and HTTP front ends: requests in, planned jobs out, limits enforced.

The front ends parse and format; this module turns a parsed request into a ``JobSpec`` (planning the span of a
document request, converting positions once, in the requested encoding), checks the limits, and submits it to
the scheduler. Every failure leaves as a ``ServeError``.

Document requests are planned by ``Engine.plan_document`` (off the event loop: it parses the document) and
batched like ``{prefix, suffix}`` ones (``document_spec``); their parse check and repair rounds run after the
last batched pass, unbatched (``Engine.finish_document`` on the scheduler's worker pool, reusing the context
the batch encoded). Rewrite mode, autoregressive checkpoints and open models without an exact context cache
run ``Engine.stream_complete`` whole on that pool instead.

``related`` (other files' text) goes to ``Engine.plan_document`` on every path. A plan that settles the request
(``DocumentPlan.answer``: a copy the model verified, or no fill) runs no denoising round: its answer is the
final pass (``JobSpec.answer``). A ``{prefix, suffix}`` request with related files is planned as the document
``prefix + suffix`` with the cursor between them, for that answer only; when planning does not settle it (or its
span cannot be written as an insertion at the cursor), the hole is denoised as without them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from edit_engine import protocol as rpc
from edit_engine.engine import DocumentPlan, Engine, Pass
from edit_engine.serve.batching import Job, JobSpec, LastPass, Overloaded, Scheduler
from edit_engine.serve.edit_work import EditWork
from edit_engine.serve.errors import ServeError
from edit_engine.serve.metrics import Metrics
from edit_engine.serve.protocol import CompletionRequest, InfillParams
from edit_engine.serve.settings import Settings
from edit_engine.syntax import positions


@dataclass(frozen=True)
class Planned:
    """A checked request: a batched job (``spec``, or ``prepare`` to make it off the event loop: then ``spec``,
    when set, is the job as far as the front end needs it, for counting its prompt) or an engine stream run
    unbatched (``run``)."""

    spec: JobSpec | None
    run: Callable[[Callable[[], bool]], Iterator[Pass]] | None = None
    range_of: Callable[[int, int], dict[str, Any]] | None = None  # LSP range of a span (document requests)
    prepare: Callable[[], JobSpec] | None = None  # plans a document request (parses it: run in a thread)


def insertion_at(text: str, cursor: int, start: int, end: int, fill: str) -> str | None:
    """``fill`` replacing ``text[start:end]`` written as an insertion at ``cursor``: what goes between
    ``text[:cursor]`` and ``text[cursor:]`` to make the same text; None when the edit cannot be written so."""
    new = text[:start] + fill + text[end:]
    tail = len(text) - cursor
    if len(new) < len(text) or not new.startswith(text[:cursor]) or not new.endswith(text[cursor:]):
        return None
    return new[cursor : len(new) - tail]


def settled_spec(engine: Engine, spec: JobSpec, related: list[str]) -> JobSpec:
    """A ``{prefix, suffix}`` job with related files: the document ``prefix + suffix`` planned with the cursor
    between them (``Engine.plan_document``); when planning settles it and its span writes as an insertion at the
    cursor, the job carries that answer (no forward pass), else it is ``spec`` unchanged. Parses the document:
    run off the event loop."""
    doc = spec.prefix + spec.suffix
    dp = engine.plan_document(doc, len(spec.prefix), spec.language, None, spec.max_tokens, related=related,
                              **spec.overrides)
    if dp.answer is None:
        return spec
    text = insertion_at(doc, len(spec.prefix), dp.start, dp.end, dp.answer.text)
    return spec if text is None else replace(spec, answer=replace(dp.answer, text=text))


def document_spec(engine: Engine, dp: DocumentPlan, seed: int = 0) -> JobSpec:
    """The batched job of an insert-mode document request: the planned hole and canvas sizes, each pass's text
    post-processed (``dp.finish``) and placed at the planned span; when the plan asks for a parse check, the
    last batched canvas and the job's encoded context go to ``Engine.finish_document`` (check, repair rounds,
    final pass)."""
    if dp.answer is not None:  # settled while planning: no round to run
        return JobSpec(dp.model_prefix, dp.model_suffix, start=dp.start, end=dp.end, answer=dp.answer)
    if dp.rewrite:
        raise ValueError("rewrite mode starts from a scored canvas: run it with Engine.stream_complete")
    then = None
    if dp.checks:
        def then(last: LastPass, should_stop: Callable[[], bool]) -> Iterator[Pass]:
            return engine.finish_document(dp, last.tokens, last.index, last.nfe, last.stop_reason, seed,
                                          should_stop, last.context)

    return JobSpec(dp.model_prefix, dp.model_suffix, dp.cfg.max_tokens, dp.cfg.initial_canvas, seed=seed, cfg=dp.cfg,
                   transform=dp.finish, start=dp.start, end=dp.end, then=then, first=dp.first,
                   nfe=dp.nfe, bias=dp.bias, ids=dp.ids)


class Service:
    """The engine, its scheduler, the metrics and the limits of one server."""

    def __init__(self, settings: Settings, engine: Engine, metrics: Metrics | None = None,
                 before_pass: Callable[[], None] | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self.metrics = metrics or Metrics()
        self.scheduler = Scheduler(engine, self.metrics, settings.max_batch, settings.max_queue, before_pass,
                                   settings.document_workers)
        self.edit_work = EditWork(settings.edit_workers, settings.max_edit_queue, settings.retry_after_s)

    @property
    def model_name(self) -> str:
        return self.engine.name

    def close(self) -> None:
        self.scheduler.close()
        self.edit_work.close()

    # ------------------------------------------------------------------ limits
    def _check_document(self, chars: int) -> None:
        if chars > self.settings.max_document_chars:
            raise ServeError("too_large", f"document of {chars:,} characters exceeds the limit of "
                             f"{self.settings.max_document_chars:,}", limit="max_document_chars")

    def _check_max_tokens(self, n: int | None) -> None:
        if n is not None and n > self.settings.max_tokens:
            raise ServeError("too_large", f"maxTokens {n} exceeds the limit of {self.settings.max_tokens}",
                             limit="max_tokens")

    def _check_related(self, related: list[str] | None) -> list[str] | None:
        """The related files' characters together within ``max_document_chars``; [] as None."""
        if not related:
            return None
        chars = sum(map(len, related))
        if chars > self.settings.max_document_chars:
            raise ServeError("too_large", f"related files of {chars:,} characters together exceed the limit of "
                             f"{self.settings.max_document_chars:,}", limit="max_document_chars")
        return related

    def _hole(self, spec: JobSpec, related: list[str] | None) -> Planned:
        """A ``{prefix, suffix}`` job; with related files, planned off the event loop (``settled_spec``)."""
        if related is None:
            return Planned(spec)
        engine = self.engine
        return Planned(spec, prepare=lambda: settled_spec(engine, spec, related))

    # ------------------------------------------------------------------ planning
    def plan_infill(self, p: InfillParams) -> Planned:
        """A websocket ``editEngine/infill`` request to a job (and the LSP range its text replaces)."""
        self._check_max_tokens(p.maxTokens)
        related = self._check_related(p.related)
        if p.text is not None:
            return self._plan_document(p, related)
        if p.prefix is None:
            raise ServeError("invalid_params", "give {prefix, suffix} or {text, position | offset}")
        suffix = p.suffix or ""
        self._check_document(len(p.prefix) + len(suffix))
        return self._hole(JobSpec(p.prefix, suffix, p.maxTokens or self._default_max(), heal=True,
                                  language=p.languageId), related)

    def _default_max(self) -> int | None:
        return self.settings.max_tokens if self.settings.max_tokens < self.engine.sampler.max_tokens else None

    def _plan_document(self, p: InfillParams, related: list[str] | None) -> Planned:
        """A document request: the engine's planner picks the span (``Engine.plan_document``, when the job is
        started), the scheduler batches its denoising passes. Positions are converted here, once, in the
        requested encoding."""
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
        repair: bool | int = True if p.repairRounds is None else p.repairRounds
        mode = "insert"  # the websocket has no rewrite mode: a range is re-denoised from an empty canvas

        def range_of(start: int, end: int) -> dict[str, Any]:
            return rpc.lsp_range(positions.offset_to_position(doc, start, enc, starts),
                                 positions.offset_to_position(doc, end, enc, starts))

        if engine.batchable and mode == "insert":
            def prepare() -> JobSpec:
                return document_spec(engine, engine.plan_document(doc, offset, language, selection, max_tokens,
                                                                  mode, repair, uri=p.uri, related=related))

            return Planned(None, range_of=range_of, prepare=prepare)

        def run(should_stop: Callable[[], bool]) -> Iterator[Pass]:
            return engine.stream_complete(doc, offset, language=language, selection=selection,
                                          max_tokens=max_tokens, should_stop=should_stop, mode=mode, repair=repair,
                                          uri=p.uri, related=related)

        return Planned(None, run, range_of)

    def plan_completion(self, r: CompletionRequest, stable: bool) -> Planned:
        """An OpenAI completion request (prompt = prefix, suffix; or a prompt in a FIM template) to a job
        (``spec``: the hole; with ``related``, planned for an answer off the event loop)."""
        try:
            prompt, suffix = r.prefix_suffix()
        except ValueError as e:
            raise ServeError("invalid_params", str(e)) from e
        self._check_document(len(prompt) + len(suffix))
        self._check_max_tokens(r.max_tokens)
        related = self._check_related(r.related)
        overrides: dict[str, Any] = {}
        if r.temperature is not None:
            overrides["temperature"] = r.temperature
        return self._hole(JobSpec(prompt, suffix, r.max_tokens or self._default_max(), seed=r.seed or 0,
                                  overrides=overrides, stable=stable, heal=True), related)

    # ------------------------------------------------------------------ running
    async def start(self, planned: Planned | JobSpec) -> Job:
        """Queue a job; planning and tokenization run off the event loop. A job settled while planning
        (``JobSpec.answer``) is answered at once."""
        loop = asyncio.get_running_loop()
        if isinstance(planned, JobSpec):
            planned = Planned(planned)
        try:
            if planned.run is not None:
                return self.scheduler.submit_stream(planned.run, loop)
            prepare = planned.prepare
            if prepare is not None:
                return await asyncio.to_thread(lambda: self._submit(prepare(), loop))
            assert planned.spec is not None
            return await asyncio.to_thread(self._submit, planned.spec, loop)
        except Overloaded as e:
            raise ServeError("overloaded", str(e), limit=e.limit, retry_after=self.settings.retry_after_s) from e
        except ValueError as e:
            raise ServeError("invalid_params", str(e)) from e

    def _submit(self, spec: JobSpec, loop: asyncio.AbstractEventLoop) -> Job:
        """A job to the scheduler (in a worker thread: it tokenizes), or, for an open model's hole, an engine
        stream on the scheduler's pool."""
        if spec.answer is None and spec.cfg is None and not self.engine.model.exact_context_cache:
            # Open full-attention models (edit_engine/hf): one approximate cache per request, no shared batch.
            eng = self.engine

            def run(should_stop: Callable[[], bool]) -> Iterator[Pass]:
                return eng.stream(spec.prefix, spec.suffix, spec.language, spec.max_tokens, spec.seed,
                                  should_stop, heal=spec.heal, single_line=spec.single_line,
                                  initial_slots=spec.initial_canvas, **spec.overrides)

            return self.scheduler.submit_stream(run, loop)
        return self.scheduler.submit(spec, loop)

    def count_tokens(self, text: str) -> int:
        return len(self.engine.tokenizer.encode(text)) if text else 0
