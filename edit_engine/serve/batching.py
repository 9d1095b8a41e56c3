"""Continuous batching: the denoising passes of concurrent requests run together in shared forward passes.

One scheduler thread owns the model. Between passes it retires finished and cancelled requests and admits
waiting ones (their contexts encoded together in one ``encode_context`` call), then runs one
``canvas_logits`` over every active request and one ``commit_pass`` per request (each keeps its own sampler
settings). Requests join and leave at pass boundaries, as in Orca's iteration-level scheduling (Yu et al.,
OSDI 2022). ``Scheduler`` is the queueing side (admission, the queue of waiting jobs, cancellation, the worker
pool); ``_Stepper`` is the stepping side (the batch, and one batched forward pass over its active rows).

How rows of different shapes share one forward pass. Each request's context K/V (L_r keys) is copied into a
batched cache of L >= max L_r context columns, followed by ``capacity`` canvas columns; ``key_valid`` hides a
row's unused context columns and the canvas columns past its own canvas width c_r. The canvas tensor is
(B, C >= max c_r), padded with masks; every length is rounded up to one of a few sizes (``shape_bucket``).
The padded slots' outputs are discarded and, being invalid keys, are seen by no real slot. Canvas attention
ignores key order (every canvas query sees every valid key, positions come from ``canvas_start``), so each row
computes what it would alone, up to float summation order. The batched cache is rebuilt only when the set of
requests changes; a canvas growing inside its capacity needs no rebuild.

Bounded: at most ``max_batch`` active and ``max_queue`` waiting; ``submit`` beyond that raises ``Overloaded``.

Document requests (text + cursor, planned by ``Engine.plan_document``) are batched the same way: their
``JobSpec`` carries the planned hole, canvas sizes, a per-pass text transform (the post-processing) and the span.
When the plan asks for a parse check, the final pass is held back and the last canvas (with the job's encoded
context, so a repair round need not encode it again) goes to a continuation (``JobSpec.then``:
``Engine.finish_document``, the check and the repair rounds) on a small pool of threads, unbatched. Requests the
scheduler cannot run (rewrite mode, autoregressive checkpoints, open models without an exact context cache) run
a whole engine stream on that pool (``submit_stream``). A job settled while planning (``JobSpec.answer``: a
verified copy, or no fill) runs no forward pass: ``submit`` answers it at once with one final pass.

Results reach the event loop through ``loop.call_soon_threadsafe`` into a per-job ``asyncio.Queue``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from edit_engine.decoding.sampler import DenoiseState, SamplerConfig, Step
from edit_engine.engine import Engine, Pass, Prepared, decode_preview, unheal
from edit_engine.engine.document import Answer
from edit_engine.model.network import ContextCache
from edit_engine.serve.metrics import Metrics

log = logging.getLogger("edit_engine.serve")


@dataclass(frozen=True)
class LastPass:
    """A job's last batched pass, not yet delivered, handed to the job's continuation."""

    tokens: torch.Tensor  # (C,) the canvas
    index: int  # the pass's index
    nfe: int  # forward passes so far
    stop_reason: str  # complete | length | line
    context: Callable[[], ContextCache]  # the job's encoded context, room for max_tokens slots (copied on call)


# (last pass, should_stop) -> the rest of the job's passes, the last one final (a document's check and repair).
Continuation = Callable[[LastPass, Callable[[], bool]], Iterator[Pass]]


class Overloaded(Exception):
    """A limit was hit; the request was not started. ``limit`` names it."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class Cancelled(Exception):
    """The job was cancelled before it finished. ``reason``: client, superseded, disconnect, shutdown."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"request cancelled ({reason})")
        self.reason = reason


@dataclass(frozen=True)
class JobSpec:
    """One fill, already planned: the hole between ``prefix`` and ``suffix``."""

    prefix: str
    suffix: str
    max_tokens: int | None = None
    initial_canvas: int | None = None
    single_line: bool = False  # cut the fill at its first newline (the planner's in-line spans)
    seed: int = 0
    overrides: dict[str, Any] = field(default_factory=dict)  # SamplerConfig fields
    cfg: SamplerConfig | None = None  # the whole sampler setting (a document plan's); overrides the three above
    stable: bool = False  # also report the committed leading text (for append-only streams)
    # Document requests (Engine.plan_document):
    transform: Callable[[str], str] | None = None  # each pass's text goes through this (post-processing)
    start: int = 0  # character offsets of the document span the text replaces, echoed on every pass
    end: int = 0
    then: Continuation | None = None  # finishes the job after its last batched pass, on the worker pool
    first: torch.Tensor | None = None  # (V,) bool: the only tokens slot 0 may take (a block header's keyword)
    nfe: int = 0  # forward passes spent before the job (a document plan's), counted in every pass's nfe
    heal: bool = False  # token healing of a prefix that ends inside a word, as ``Engine.infill`` does
    language: str = "python"  # a {prefix, suffix} request's language (the novel-name penalty's common words)
    bias: torch.Tensor | None = None  # (V,) float: a document plan's novel-name penalty (``DocumentPlan.bias``)
    ids: tuple[list[int], list[int]] | None = None  # prefix and suffix tokens, when the plan made them already
    # Settled while planning (``DocumentPlan.answer``): no forward pass; one final pass carries this text.
    answer: Answer | None = None


@dataclass(frozen=True)
class JobPass:
    """One pass of one job, as the front ends see it."""

    index: int
    text: str  # the whole span as it stands (committed tokens; masked slots left out)
    masked: int
    final: bool
    nfe: int
    stop_reason: str  # on the final pass: complete | length | line
    stable: str | None = None  # committed tokens before the first masked slot (only if JobSpec.stable)
    start: int = 0  # character offsets of the replaced span (document requests)
    end: int = 0
    preview: str = ""  # the span with a placeholder where each masked slot sits ("" when none is)
    source: str = "model"  # on the final pass: who wrote the fill (model | copy | none)
    reason: str = ""  # on the final pass of no fill: why


_END = object()


class Job:
    """The handle a front end holds: iterate ``passes()``, call ``cancel(reason)``."""

    def __init__(self, job_id: int, loop: asyncio.AbstractEventLoop, spec: JobSpec | None = None,
                 prepared: Prepared | None = None) -> None:
        self.id = job_id
        self.spec = spec or JobSpec("", "")
        self.prepared = prepared  # what the engine made of the spec: sampler settings, context tokens, healing
        self.loop = loop
        self.submitted = time.perf_counter()
        self.cancel_reason: str | None = None
        self._cancelled = threading.Event()
        self._queue: asyncio.Queue[JobPass | BaseException | object] = asyncio.Queue()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self, reason: str = "client") -> bool:
        """Stop the job before its next forward pass. Returns False if it was already cancelled."""
        if self._cancelled.is_set():
            return False
        self.cancel_reason = reason
        self._cancelled.set()
        self._deliver(Cancelled(reason))
        return True

    def _deliver(self, item: JobPass | BaseException | object) -> None:
        try:
            self.loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shut down): nobody is listening
            pass

    async def passes(self) -> AsyncIterator[JobPass]:
        """Every pass until the final one. Raises ``Cancelled`` once cancelled, or the job's error."""
        while True:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                raise item
            if item is _END:
                return
            assert isinstance(item, JobPass)
            yield item
            if item.final:
                return


@dataclass(eq=False)
class _Active:
    """A job in the batch: its context K/V rows and its denoising state (``sampler.DenoiseState``)."""

    job: Job
    cfg: SamplerConfig
    k: list[torch.Tensor]  # per layer (1, H, L_r, hd)
    v: list[torch.Tensor]
    valid: torch.Tensor  # (1, L_r) bool
    canvas_start: torch.Tensor  # (1,)
    state: DenoiseState  # canvas (1, c_r), masks, length rule, pass counters
    admitted: float

    @property
    def ctx_len(self) -> int:
        return int(self.valid.shape[1])

    @property
    def size(self) -> int:
        return self.state.size


@dataclass
class _Batch:
    """The batched context cache of the current set of requests."""

    k: list[torch.Tensor]  # per layer (B, H, L + capacity, hd)
    v: list[torch.Tensor]
    key_valid: torch.Tensor  # (B, L + capacity)
    canvas_start: torch.Tensor  # (B,)
    ctx_len: int
    capacity: int


class Scheduler:
    """Owns the model in one thread; batches the passes of every admitted job.

    This class is the queueing side: admission (a request checked, tokenized and queued, or refused with
    ``Overloaded``), the queue of jobs waiting for a batch slot, cancellation of waiting jobs, the worker
    pool (whole streams and continuations) and shutdown. Its thread takes as many waiting jobs as the batch
    has room for and hands them to a ``_Stepper``, which owns the batch and runs its forward passes."""

    def __init__(self, engine: Engine, metrics: Metrics | None = None, max_batch: int = 16, max_queue: int = 64,
                 before_pass: Callable[[], None] | None = None, stream_workers: int = 2) -> None:
        self.engine = engine
        self.metrics = metrics or Metrics()
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.before_pass = before_pass  # instrumentation hook, called in the scheduler thread before a pass
        self._cond = threading.Condition()
        self._waiting: collections.deque[Job] = collections.deque()
        self._stepper = _Stepper(engine, self.metrics, before_pass, self._hand_off)
        self._ids = itertools.count(1)
        self.stream_workers = stream_workers
        self._streams = 0  # whole streams (submit_stream) submitted and not finished
        self._stream_jobs: set[Job] = set()  # jobs on the pool: whole streams and continuations
        self._followups = 0  # continuations submitted and not finished
        self._pool = concurrent.futures.ThreadPoolExecutor(stream_workers, thread_name_prefix="edit-engine-doc")
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="edit-engine-scheduler", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ any thread
    def submit(self, spec: JobSpec, loop: asyncio.AbstractEventLoop) -> Job:
        """Check and tokenize ``spec`` and queue it; a spec settled while planning (``spec.answer``) is answered
        at once, with no forward pass. Raises ValueError (bad request) or Overloaded."""
        if spec.answer is not None:
            return _answered(self, spec, loop)
        eng = self.engine
        if spec.cfg is not None:  # a document plan's hole: its settings and context are made already
            p_ids, s_ids = spec.ids or eng.context_ids(spec.prefix, spec.suffix)
            prepared = Prepared(spec.cfg, p_ids, s_ids, "", spec.first, spec.bias)
        else:  # same checks, clamping, healing and penalty as Engine.stream
            prepared = eng.prepare(spec.prefix, spec.suffix, spec.language, spec.max_tokens, spec.initial_canvas,
                                   spec.heal, **spec.overrides)
        job = Job(next(self._ids), loop, spec, prepared)
        with self._cond:
            if self._stop:
                raise Overloaded("the server is shutting down", "shutdown")
            if self._backlog() >= self.max_queue:  # make room first by dropping cancelled waiters
                for j in [j for j in self._waiting if j.cancelled]:
                    self._waiting.remove(j)
                    self.metrics.retired.inc(reason="cancelled")
            if self._backlog() >= self.max_queue:
                raise Overloaded(f"queue full ({self.max_queue} requests waiting); retry later", "queue")
            self._waiting.append(job)
            self.metrics.queue_depth.set(len(self._waiting))
            self._cond.notify()
        return job

    def _backlog(self) -> int:
        """Work waiting (caller holds ``_cond``): jobs waiting for a batch slot, and continuations (repair
        rounds) waiting for a free worker."""
        return len(self._waiting) + max(0, self._followups - self.stream_workers)

    def submit_stream(self, run: Callable[[Callable[[], bool]], Iterator[Pass]],
                      loop: asyncio.AbstractEventLoop) -> Job:
        """Run an engine stream (``run(should_stop)``) unbatched on one of ``stream_workers`` threads: requests
        whose passes the scheduler cannot share (``Engine.stream_complete`` of an autoregressive or open
        checkpoint, or in rewrite mode). Bounded like the queue: at most ``stream_workers + max_queue`` such
        jobs. Raises Overloaded."""
        job = Job(next(self._ids), loop)
        with self._cond:
            if self._stop:
                raise Overloaded("the server is shutting down", "shutdown")
            if self._streams >= self.stream_workers + self.max_queue:
                raise Overloaded(f"{self._streams} document requests in progress or waiting; retry later", "queue")
            self._streams += 1
            self._stream_jobs.add(job)
        self._pool.submit(self._run_stream, job, run)
        return job

    def _run_stream(self, job: Job, run: Callable[[Callable[[], bool]], Iterator[Pass]],
                    followup: bool = False) -> None:
        """Run ``run(should_stop)`` and deliver its passes: a whole stream (``submit_stream``) or, with
        ``followup``, the continuation of a job whose batched passes are done."""
        try:
            if not followup:
                self.metrics.queue_wait.observe(time.perf_counter() - job.submitted)
            if job.cancelled:
                self.metrics.retired.inc(reason="cancelled")
                return
            def should_stop() -> bool:  # the engine asks before every forward pass
                if self.before_pass is not None:
                    self.before_pass()
                return job.cancelled

            gen = run(should_stop)
            try:
                for p in gen:
                    if p.index == 0:
                        self.metrics.first_pass.observe(time.perf_counter() - job.submitted)
                    self.metrics.passes.inc()
                    job._deliver(JobPass(p.index, p.text, p.masked, p.final, p.nfe, p.stop_reason, None,
                                         p.start, p.end, p.preview, p.source, p.reason))
                    if p.final:
                        self.metrics.retired.inc(reason="done")
                        self.metrics.latency.observe(time.perf_counter() - job.submitted)
                        return
                    if job.cancelled:
                        break
            finally:
                gen_close = getattr(gen, "close", None)
                if gen_close is not None:
                    gen_close()
            # the stream ended without a final pass: cancelled (should_stop) or closed
            self.metrics.retired.inc(reason="cancelled")
            job._deliver(Cancelled(job.cancel_reason or "stopped"))
        except Exception as e:
            self.metrics.retired.inc(reason="error")
            job._deliver(e)
        finally:
            with self._cond:
                if followup:
                    self._followups -= 1
                else:
                    self._streams -= 1
                self._stream_jobs.discard(job)

    def _hand_off(self, a: _Active, stop: str) -> None:
        """A job's last batched pass is done and its spec has a continuation: run it on the pool (the pass is
        not delivered here; the continuation delivers it, checked, with any repair passes after it)."""
        then = a.job.spec.then
        assert then is not None
        st = a.state
        last = LastPass(st.canvas[0].clone(), st.index, st.nfe + a.job.spec.nfe, stop,
                        lambda: _own_context(a, a.cfg.max_tokens))

        def run(should_stop: Callable[[], bool]) -> Iterator[Pass]:
            return then(last, should_stop)

        with self._cond:
            self._followups += 1
            self._stream_jobs.add(a.job)
        try:
            self._pool.submit(self._run_stream, a.job, run, True)
        except RuntimeError:  # the pool is shut down (the server is closing)
            with self._cond:
                self._followups -= 1
                self._stream_jobs.discard(a.job)
            self.metrics.retired.inc(reason="cancelled")
            a.job.cancel("shutdown")

    def close(self) -> None:
        """Stop the thread; every job not finished is cancelled (reason ``shutdown``)."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=30)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._cond:
            for job in list(self._waiting) + [a.job for a in self._stepper.active] + list(self._stream_jobs):
                job.cancel("shutdown")
            self._waiting.clear()
            self._stepper.active.clear()

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return len(self._waiting)

    @property
    def _active(self) -> list[_Active]:
        """The jobs in the batch (the stepper's; read them in the scheduler thread, or holding ``_cond``)."""
        return self._stepper.active

    # ------------------------------------------------------------------ the scheduler thread
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._waiting and not self._stepper.active:
                    self._cond.wait()
                if self._stop:
                    return
                room = self.max_batch - len(self._stepper.active)
                admit = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
                self.metrics.queue_depth.set(len(self._waiting))
            try:
                self._stepper.step(self._still_wanted(admit))
            except Exception as e:  # a failed forward pass fails its batch, not the server
                self._stepper.fail_all(e)

    def _still_wanted(self, jobs: list[Job]) -> list[Job]:
        """The jobs taken from the queue that were not cancelled while they waited; their wait is measured."""
        for j in jobs:
            if j.cancelled:  # cancelled while it waited
                self.metrics.retired.inc(reason="cancelled")
        jobs = [j for j in jobs if not j.cancelled]
        for j in jobs:
            self.metrics.queue_wait.observe(time.perf_counter() - j.submitted)
        return jobs


class _Stepper:
    """The stepping side of the scheduler: the jobs in the batch (``active``), their batched context cache,
    and one scheduler step at a time: admit the jobs the queue hands over (their contexts encoded together,
    their denoising states started), drop the cancelled ones, run one ``canvas_logits`` over every active row
    and one commit per row, deliver each row's pass, retire the finished ones. A job whose batched passes end
    with a continuation goes to ``hand_off`` (the scheduler's worker pool). Scheduler thread only."""

    def __init__(self, engine: Engine, metrics: Metrics, before_pass: Callable[[], None] | None,
                 hand_off: Callable[[_Active, str], None]) -> None:
        self.engine = engine
        self.metrics = metrics
        self.before_pass = before_pass  # instrumentation hook, called before each forward pass
        self.hand_off = hand_off
        self.active: list[_Active] = []
        self.batch: _Batch | None = None  # rebuilt when the set of active jobs changes

    def step(self, admit: list[Job]) -> None:
        """Admit ``admit`` (jobs from the queue, none cancelled) and run one forward pass over the batch."""
        changed = self._drop_cancelled()
        if admit:
            self._admit(admit)
            changed = True
        self.metrics.active.set(len(self.active))
        if not self.active:
            return
        if self.before_pass is not None:
            self.before_pass()
        if self._drop_cancelled():  # cancelled while the hook held us
            changed = True
            if not self.active:
                return
        if changed or self.batch is None:
            self.batch = _batch_cache(self.active)
        self._forward()

    def fail_all(self, e: BaseException) -> None:
        """A step failed: every active job gets the error and the batch is emptied."""
        for a in self.active:
            self._fail(a.job, e)
        self.active = []
        self.batch = None

    def _drop_cancelled(self) -> bool:
        keep = [a for a in self.active if not a.job.cancelled]
        if len(keep) == len(self.active):
            return False
        for a in self.active:
            if a.job.cancelled:
                self._retire(a, "cancelled")
        self.active = keep
        self.metrics.active.set(len(keep))
        return True

    def _retire(self, a: _Active, reason: str) -> None:
        self.metrics.retired.inc(reason=reason)

    def _admit(self, jobs: list[Job]) -> None:
        """Encode the jobs' contexts in one call and start their denoising states. A job whose admission fails
        (a bad setting that got past the checks, a failed encode) gets that error and is dropped; the others
        are admitted."""
        model = self.engine.model
        preps = [j.prepared for j in jobs]
        try:
            assert all(p is not None for p in preps)
            pre = [p.prefix_ids for p in preps if p]
            suf = [p.suffix_ids for p in preps if p]
            cache = model.encode_context(pre, suf, capacity=0, at_least=(
                shape_bucket(max(map(len, pre))), shape_bucket(max(map(len, suf)))))
        except Exception as e:
            for j in jobs:
                self._fail(j, e)
            return
        now = time.perf_counter()
        for r, j in enumerate(jobs):
            try:
                self.active.append(_activate(self.engine, j, cache, r, now))
            except Exception as e:
                self._fail(j, e)

    def _fail(self, job: Job, e: BaseException) -> None:
        log.warning("request %d failed: %s: %s", job.id, type(e).__name__, e)
        self.metrics.retired.inc(reason="error")
        job._deliver(e)

    def _forward(self) -> None:
        batch = self.batch
        assert batch is not None
        act = self.active
        tok = self.engine.tokenizer
        dev = act[0].state.canvas.device
        sizes = torch.tensor([a.size for a in act], device=dev)  # (B,)
        width = min(batch.capacity, _round_up(max(a.size for a in act), 8))  # a few widths (see shape_bucket)
        canvas = torch.full((len(act), width), tok.mask_id, dtype=torch.long, device=dev)  # (B, C)
        for r, a in enumerate(act):
            canvas[r, : a.size] = a.state.canvas[0]
        # Canvas columns past a row's own width are invalid keys for that row.
        batch.key_valid[:, batch.ctx_len :] = (
            torch.arange(batch.capacity, device=dev).unsqueeze(0) < sizes.unsqueeze(1))
        cache = ContextCache(batch.k, batch.v, batch.key_valid, batch.canvas_start, batch.ctx_len, batch.capacity)
        logits = self.engine.model.canvas_logits(canvas, cache)  # (B, C, V)
        self.metrics.forward_passes.inc()
        self.metrics.batch_size.observe(len(act))
        for r, a in enumerate(act):
            a.state.step(logits[r : r + 1, : a.size])
        # One host read for the whole batch: each row's masked count, committed pad and decided first line.
        stats = torch.stack([a.state.stats() for a in act]).tolist()
        done: list[_Active] = []  # finished here
        gone: list[_Active] = []  # out of the batch for another reason (continuation, error)
        for a, row in zip(act, stats, strict=True):
            step = a.state.advance(*row)  # the pass's Step; grows a full canvas when the run goes on
            if step.final and a.job.spec.then is not None:
                gone.append(a)
                self.hand_off(a, step.stop_reason)
                continue
            try:
                self._emit(a, step)
            except Exception as e:  # a request's text transform failed: that request fails, not the batch
                gone.append(a)
                self._fail(a.job, e)
                continue
            if step.final:
                done.append(a)
        if done or gone:
            for a in done:
                self._retire(a, "done")
                self.metrics.latency.observe(time.perf_counter() - a.job.submitted)
            self.active = [a for a in act if a not in done and a not in gone]
            self.batch = None  # the set changed: rebuild before the next pass
            self.metrics.active.set(len(self.active))

    def _emit(self, a: _Active, step: Step) -> None:
        text, stable, preview = _pass_text(self.engine.tokenizer, a.job, step)
        if step.index == 0:
            self.metrics.first_pass.observe(time.perf_counter() - a.job.submitted)
        self.metrics.passes.inc()
        spec = a.job.spec
        a.job._deliver(JobPass(step.index, text, step.masked, step.final, step.nfe + spec.nfe, step.stop_reason,
                               stable, spec.start, spec.end, preview))


def _batch_cache(act: list[_Active]) -> _Batch:
    """The batched cache of the active jobs: contexts left-aligned, padded to the longest's bucket."""
    b = len(act)
    L = shape_bucket(max(a.ctx_len for a in act))
    cap = _round_up(max(a.cfg.max_tokens for a in act), 16)
    ref = act[0].k[0]
    _, h, _, hd = ref.shape
    ks, vs = [], []
    for i in range(len(act[0].k)):
        k = torch.zeros(b, h, L + cap, hd, dtype=ref.dtype, device=ref.device)
        v = torch.zeros_like(k)
        for r, a in enumerate(act):
            k[r, :, : a.ctx_len] = a.k[i][0]
            v[r, :, : a.ctx_len] = a.v[i][0]
        ks.append(k)
        vs.append(v)
    valid = torch.zeros(b, L + cap, dtype=torch.bool, device=ref.device)
    for r, a in enumerate(act):
        valid[r, : a.ctx_len] = a.valid[0]
    starts = torch.cat([a.canvas_start for a in act])
    return _Batch(ks, vs, valid, starts, L, cap)


def shape_bucket(n: int) -> int:
    """``n`` rounded up to one of a few lengths, at most an eighth more (multiples of 16 below 256, then 8 per
    doubling). The contexts and the batched cache are padded to such lengths, canvases and their capacity to
    multiples of 8 and 16, the padding masked out: the CPU libraries keep state per tensor shape (oneDNN's primitives, the
    allocator's pools), and under load shapes that vary freely made the server's memory grow without end (1.1 GB
    in 670 passes of random lengths, against 70 MB with the lengths bucketed)."""
    return _round_up(n, max(16, 1 << max(0, n.bit_length() - 4)))


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def _pass_text(tok: Any, job: Job, step: Step) -> tuple[str, str | None, str]:
    """A pass's text as the job shows it (healed word left out, first line, post-processing); with
    ``JobSpec.stable`` the committed text before the first masked slot; and its preview (the same with a
    placeholder where each masked slot sits, "" when none is)."""
    prep, spec = job.prepared, job.spec
    assert prep is not None
    ids = step.tokens.tolist()  # the canvas as this pass left it (before any growth)
    text = unheal(tok.decode(ids), prep.healed)
    preview = unheal(decode_preview(tok, ids), prep.healed)
    stable = None
    if spec.stable:
        cut = ids.index(tok.mask_id) if tok.mask_id in ids else len(ids)
        # An unfinished UTF-8 sequence is not stable yet; nor is anything before slot 0 holds the healed word.
        stable = tok.decode(ids[:cut]).rstrip("\ufffd")
        if prep.healed:
            stable = stable[len(prep.healed) :] if stable.startswith(prep.healed) else ""
    if spec.single_line:
        text, preview = _first_line(text), _first_line(preview)
        stable = _first_line(stable) if stable is not None else None
    if spec.transform is not None:
        text = spec.transform(text)
        preview = spec.transform(preview) if preview else ""
    return text, stable, preview


def _activate(engine: Engine, job: Job, cache: ContextCache, row: int, now: float) -> _Active:
    """A job admitted to the batch: its rows of the admission's encoded ``cache`` and a fresh denoising state."""
    p, tok = job.prepared, engine.tokenizer
    assert p is not None
    state = DenoiseState(p.cfg, tok.pad_id, tok.mask_id, engine.model.device, seed=job.spec.seed,
                         line_end=engine.line_end if p.cfg.line_stop else None, first=p.first, bias=p.bias)
    r = slice(row, row + 1)
    return _Active(job=job, cfg=p.cfg, k=[k[r] for k in cache.k], v=[v[r] for v in cache.v],
                   valid=cache.key_valid[r, : cache.ctx_len], canvas_start=cache.canvas_start[r], state=state,
                   admitted=now)


def _own_context(a: _Active, capacity: int) -> ContextCache:
    """A batch-of-one cache of ``a``'s context rows (as its admission encoded them) with room for ``capacity``
    canvas slots: what ``Engine`` would encode for the request alone, up to float summation order."""
    L = a.ctx_len
    ks, vs = [], []
    for k, v in zip(a.k, a.v, strict=True):  # (1, H, L, hd) each
        _, h, _, hd = k.shape
        kk = k.new_zeros(1, h, L + capacity, hd)
        vv = v.new_zeros(1, h, L + capacity, hd)
        kk[:, :, :L] = k
        vv[:, :, :L] = v
        ks.append(kk)
        vs.append(vv)
    valid = torch.ones(1, L + capacity, dtype=torch.bool, device=a.valid.device)
    valid[:, :L] = a.valid
    return ContextCache(ks, vs, valid, a.canvas_start.clone(), L, capacity)


def _first_line(text: str) -> str:
    nl = text.find("\n")
    return text if nl < 0 else text[:nl]


def _answered(self: Scheduler, spec: JobSpec, loop: asyncio.AbstractEventLoop) -> Job:
    """A job whose answer planning found: one final pass, delivered now (nothing is queued)."""
    a = spec.answer
    assert a is not None
    job = Job(next(self._ids), loop, spec)
    with self._cond:
        if self._stop:
            raise Overloaded("the server is shutting down", "shutdown")
    self.metrics.first_pass.observe(time.perf_counter() - job.submitted)
    self.metrics.passes.inc()
    job._deliver(JobPass(0, a.text, 0, True, a.nfe, "complete", None, spec.start, spec.end, "", a.source,
                         a.reason))
    self.metrics.retired.inc(reason="done")
    self.metrics.latency.observe(time.perf_counter() - job.submitted)
    return job
