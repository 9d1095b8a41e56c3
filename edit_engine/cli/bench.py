"""``edit-engine bench``: fill latency of each sampler on real code, and of typing into a document.

    edit-engine bench --threads 1                  # full grid: under 8 minutes on a 2-core CPU
    edit-engine bench --quick --json               # under a minute
    edit-engine bench --ar-model DIR               # another autoregressive baseline (default: the packaged one)
    edit-engine bench --device cuda

Rows (one per sampler, context size and span), all from one process, on the same inputs, interleaved, after a
warm-up (docs/bench.md explains each):

- ``naive``: ``sampler.reference_denoise``, a full recompute of prefix + suffix + canvas every pass, one token
  per pass (LLaDA low-confidence remasking);
- ``nocache``: the fast sampler's commit policy (``sampler.denoise``), but every pass recomputes the whole
  sequence instead of attending to cached context keys;
- ``fast``: the default engine path (``Engine.infill``): context encoded once, passes over the canvas only;
- ``ar``: the autoregressive baseline (the packaged one, or ``--ar-model``) through the same engine call: one
  token per pass with a key/value cache.

The span is forced to ``span_tokens``: a fixed canvas (``initial_canvas = max_tokens = span``) in which pads
are forbidden (``min_tokens = span``; for ``ar``, eos is), so every sampler generates exactly that many
tokens. Inputs are Python standard-library files (a fixed seed picks them and the cut). The ``keystroke``
scenario types a line of code one character at a time into a document and fills after every keystroke
through ``Engine.complete`` with the per-document context cache, and again with it off.

A table goes to stdout; with ``--json`` one JSON object is the last line of stdout. Progress goes to stderr.
``--plot DIR`` also draws the rows and the keystroke scenario as PNG files (``plots.bench_plots``).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import random
import sys
import sysconfig
import time
import tokenize
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edit_engine.cli.args import UserError, add_dtype_arg

if TYPE_CHECKING:
    import torch

    from edit_engine.engine import Engine
    from edit_engine.model.network import DiffusionLM


@dataclass(frozen=True)
class BenchSpec:
    """What to measure. The defaults are the full run; ``QUICK`` is ``--quick``."""

    spans: tuple[int, ...] = (16, 32, 64, 128)  # tokens per fill (clamped to the model's max_canvas)
    contexts: tuple[int, ...] = (256, 1024, 2048)  # prefix + suffix tokens (at most max_prefix + max_suffix)
    reps: int = 5  # timed runs per row, at most
    # A row stops repeating once its runs took this long (at least one run): naive and nocache make a full
    # forward pass per token here (about 0.3 s at 1,000 context tokens on one loaded CPU thread).
    row_budget_s: float = 2.0
    # On a CPU, naive and nocache skip spans above ``slow_max_span`` at contexts of ``slow_from_context``
    # tokens and more: their time is span x one full forward pass (measured by the shorter spans' rows), and
    # the skipped rows would take about 55 s per run at 1,280 context tokens.
    slow_max_span: int = 64
    slow_from_context: int = 1024
    line_chars: int = 40  # keystroke scenario: characters typed
    keystroke_context: int = 1024  # keystroke scenario: context tokens around the typed line
    keystroke_max_tokens: int = 16  # keystroke scenario: the longest fill (an inline suggestion)
    seed: int = 0


QUICK = BenchSpec(spans=(16,), contexts=(256, 1024), reps=3, row_budget_s=1.0, line_chars=8)
SAMPLERS = ("naive", "nocache", "fast", "ar")
KEYSTROKE_URI = "bench://keystroke.py"
ROUNDS = 2  # keystroke scenario: each engine types the line this many times


@dataclass
class Row:
    sampler: str
    span_tokens: int
    context_tokens: int  # prefix + suffix tokens the model saw
    p50_ms: float
    p95_ms: float
    nfe_per_token: float  # forward passes per generated token
    tokens_per_s: float  # span_tokens / p50
    reps: int
    times_ms: list[float] = field(default_factory=list)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("bench", help="fill latency of each sampler (naive, nocache, fast, ar) and of typing")
    p.set_defaults(handler=_bench)
    p.add_argument("--json", action="store_true", help="print one JSON object (last line of stdout)")
    p.add_argument("--quick", action="store_true", help="small grid: about a minute on a 2-core CPU")
    p.add_argument("--model", help="diffusion checkpoint directory (default: the packaged model)")
    p.add_argument("--ar-model", help="autoregressive baseline checkpoint (objective 'ar'; default: the packaged "
                                      "one, the same network and data as the packaged model)")
    p.add_argument("--no-ar", action="store_true", help="skip the autoregressive baseline's rows")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    add_dtype_arg(p)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the diffusion model's per-pass step first (Engine.compile): the fast rows "
                        "and the keystroke scenario use it; naive, nocache and ar do not")
    p.add_argument("--seed", type=int, default=0, help="picks the input files and cuts")
    p.add_argument("--plot", metavar="DIR",
                   help="also write PNG plots to DIR: bench_latency.png, bench_passes.png (needs matplotlib)")
    # Hidden: sizes for the tests.
    p.add_argument("--spans", type=_ints, help=argparse.SUPPRESS)
    p.add_argument("--contexts", type=_ints, help=argparse.SUPPRESS)
    p.add_argument("--reps", type=int, help=argparse.SUPPRESS)
    p.add_argument("--line-chars", type=int, help=argparse.SUPPRESS)
    p.add_argument("--keystroke-context", type=int, help=argparse.SUPPRESS)


# The autoregressive baseline shipped beside the packaged model (its MODEL.md says how it was trained): the rows
# ``ar`` of a bench of the packaged model use it unless told otherwise.
AR_BASELINE = Path(__file__).resolve().parents[1] / "models" / "ar-baseline"


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x)


def _bench(a: argparse.Namespace) -> int:
    import torch

    from edit_engine.engine import Engine
    from edit_engine.model.checkpoint import CheckpointError

    if a.plot:  # a one-line error now, before the run, when matplotlib is missing
        from edit_engine.cli.plots import require

        require(UserError)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available")
    spec = QUICK if a.quick else BenchSpec()
    over = {k: v for k, v in (("spans", a.spans), ("contexts", a.contexts), ("reps", a.reps),
                              ("line_chars", a.line_chars), ("keystroke_context", a.keystroke_context),
                              ("seed", a.seed)) if v is not None}
    spec = BenchSpec(**{**asdict(spec), **over})
    try:
        engine = Engine.load(a.model, device=a.device, dtype=a.dtype)
        ar_path = None if a.no_ar else a.ar_model or (AR_BASELINE if a.model is None and AR_BASELINE.is_dir()
                                                      else None)
        ar_engine = Engine.load(ar_path, device=a.device, dtype=a.dtype) if ar_path else None
    except CheckpointError as e:
        raise UserError(str(e)) from e
    if engine.is_ar:
        raise UserError("--model must be a diffusion checkpoint (give the AR baseline with --ar-model)")
    if ar_engine is not None and not ar_engine.is_ar:
        raise UserError(f"--ar-model {a.ar_model}: not an autoregressive checkpoint (config objective 'ar')")
    compiled_s = None
    if a.compile:
        try:
            compiled_s = engine.compile()
        except RuntimeError as e:
            raise UserError(str(e)) from e
        print(f"compiled the per-pass step in {compiled_s:.1f} s", file=sys.stderr)
    result = run_bench(engine, ar_engine, spec, progress=sys.stderr)
    result["compiled_s"] = None if compiled_s is None else round(compiled_s, 1)
    result["command"] = _command_line(a)
    result["model"] = str(engine.path or "")
    result["ar_model"] = str(ar_engine.path) if ar_engine is not None and ar_engine.path else None
    print(table(result))
    if a.json:
        print(json.dumps(result))
    if a.plot:
        from edit_engine.cli.plots import bench_plots

        print("plots: " + ", ".join(map(str, bench_plots(result, a.plot))), file=sys.stderr)
    return 0


def _command_line(a: argparse.Namespace) -> str:
    parts = ["edit-engine", "bench"]
    for flag in ("json", "quick", "compile", "no_ar"):
        if getattr(a, flag, False):
            parts.append(f"--{flag.replace('_', '-')}")
    for flag in ("model", "ar_model", "device", "dtype", "threads", "seed", "spans", "contexts", "reps", "line_chars",
                 "keystroke_context"):
        v = getattr(a, flag)
        if v is None or (flag, v) in (("device", "cpu"), ("threads", 0), ("seed", 0)):
            continue
        parts += [f"--{flag.replace('_', '-')}", ",".join(map(str, v)) if isinstance(v, tuple) else str(v)]
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------------- inputs
def _sources(seed: int) -> list[str]:
    """Python standard-library files, in an order fixed by ``seed``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.stat().st_size > 20_000)
    random.Random(seed).shuffle(files)
    out = []
    for p in files[:40]:
        try:
            out.append(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    if not out:
        raise UserError(f"no Python sources found under {root}")
    return out


def _split(engine: Engine, context: int) -> tuple[int, int]:
    """(prefix, suffix) tokens for a context size: a quarter suffix, at most the model's budgets (a few tokens
    under the prefix budget: re-tokenizing the cut text can add one, which would trim a whole step)."""
    mc = engine.model.cfg
    n_suf = min(mc.max_suffix, context // 4)
    return min(mc.max_prefix - 8, context - n_suf), n_suf


def _hole(engine: Engine, texts: list[str], n_pre: int, n_suf: int, span: int, rng: random.Random,
          ) -> tuple[str, str]:
    """Prefix and suffix text around a ``span``-token hole at a random cut of a file long enough for them."""
    tok = engine.tokenizer
    for text in texts:
        ids = tok.encode(text)
        if len(ids) >= n_pre + span + n_suf + 16:
            c = rng.randrange(n_pre, len(ids) - span - n_suf)
            return tok.decode(ids[c - n_pre : c]), tok.decode(ids[c + span : c + span + n_suf])
    raise UserError(f"no source file has {n_pre + span + n_suf} tokens")


# -------------------------------------------------------------------------------------------------- samplers
def _full_recompute(model: DiffusionLM, prefix: list[int], suffix: list[int]) -> DiffusionLM:
    """The model with its weights, whose ``canvas_hidden`` ignores the context cache and recomputes prefix,
    suffix and canvas together (``forward``): the fast sampler's loop, without the cache."""
    import torch
    import torch.nn as nn

    from edit_engine.model.network import CANVAS, PREFIX, SUFFIX, ContextCache
    from edit_engine.model.network import DiffusionLM as _LM

    class FullRecompute(_LM):
        def __init__(self) -> None:
            nn.Module.__init__(self)  # share the weights; build none
            self.cfg = model.cfg
            self.embed, self.blocks, self.final_norm = model.embed, model.blocks, model.final_norm
            self.int8_head = model.int8_head
            self.context = torch.tensor([prefix + suffix], dtype=torch.long, device=model.device)
            self.kinds = [PREFIX] * len(prefix) + [SUFFIX] * len(suffix)

        @torch.no_grad()
        def canvas_hidden(self, canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:
            c = canvas.shape[1]
            kind = torch.tensor([self.kinds + [CANVAS] * c], dtype=torch.int8, device=canvas.device)
            return self.forward(torch.cat([self.context, canvas], 1), kind)[:, -c:]

    return FullRecompute().eval()


def _runner(name: str, engine: Engine, ar_engine: Engine | None, prefix: str, suffix: str, span: int,
            ) -> Callable[[], int]:
    """A closure that fills the hole once with sampler ``name`` and returns its forward passes (nfe)."""
    from edit_engine.decoding.sampler import Step, denoise, reference_denoise

    tok, model = engine.tokenizer, engine.model
    cfg = engine.sampler.with_(initial_canvas=span, max_tokens=span, min_tokens=span)
    if name in ("fast", "ar"):
        eng = engine if name == "fast" else ar_engine
        assert eng is not None

        def run_engine() -> int:
            return eng.infill(prefix, suffix, max_tokens=span, initial_canvas=span, min_tokens=span).nfe

        return run_engine
    p_ids, s_ids = engine.context_ids(prefix, suffix)  # the same ids the engine path uses

    def count(steps: Iterator[Step]) -> int:
        last = deque(steps, maxlen=1)[0]
        if int(((last.tokens != tok.pad_id) & (last.tokens != tok.mask_id)).sum()) != span:
            raise AssertionError(f"{name} generated a fill of other than {span} tokens")
        return last.nfe

    if name == "naive":
        return lambda: count(reference_denoise(model, p_ids, s_ids, cfg, tok.pad_id, tok.mask_id))
    full = _full_recompute(model, p_ids, s_ids)
    empty = model.encode_context([[]], [[]], capacity=span)  # denoise reads only its batch and capacity
    return lambda: count(denoise(full, empty, cfg, tok.pad_id, tok.mask_id))


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


# ---------------------------------------------------------------------------------------------------- the run
def run_bench(engine: Engine, ar_engine: Engine | None, spec: BenchSpec,
              progress: Any = None) -> dict[str, Any]:
    """Measure the rows and the keystroke scenario; returns the JSON object (less ``command``)."""
    t_start = time.perf_counter()
    log = (lambda msg: print(f"bench: {msg}", file=progress, flush=True)) if progress else (lambda msg: None)
    notes: list[str] = []
    grid = _grid(engine, ar_engine, spec, notes)
    dev = engine.model.device
    log("warm-up")
    c0, s0, pre0, suf0 = grid.cells[0]
    for n in grid.samplers:
        _runner(n, grid.plain, grid.ar_plain, pre0, suf0, min(s0, 8))()
    times, stats = _measure(grid, spec, dev, log)
    rows = []
    for n, c, s in grid.runners:
        ts, st = times[(n, c, s)], stats[(n, c, s)]
        p50 = _pct(ts, 50)
        mean_nfe = sum(st) / len(st)
        rows.append(Row(n, s, grid.ctx_actual[(c, s)], round(p50, 2), round(_pct(ts, 95), 2),
                        round(mean_nfe / s, 3), round(1e3 * s / p50, 1) if p50 > 0 else 0.0, len(ts),
                        [round(t, 2) for t in ts]))
    if any(r.reps < spec.reps for r in rows):
        notes.append(f"rows stop repeating after {spec.row_budget_s:g} s of runs (one at least; see reps)")
    log("keystroke scenario")
    keystroke = _keystroke(engine, spec, grid.texts)
    log("pass against the floors")
    return {
        "rows": [asdict(r) for r in sorted(rows, key=lambda r: (r.context_tokens, r.span_tokens,
                                                                  SAMPLERS.index(r.sampler)))],
        "keystroke": keystroke,
        "pass": _pass_floor(engine, grid.texts, spec),
        "machine": _machine(dev),
        "spec": asdict(spec),
        "notes": notes,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }


def _pass_floor(engine: Engine, texts: list[str], spec: BenchSpec) -> dict[str, Any] | None:
    """``pass_floor.pass_rows`` at the context the model serves (its ``max_prefix`` / ``max_suffix``), cut from
    the first input file; None for a model that is not ours."""
    from edit_engine.decoding import pass_floor
    from edit_engine.model.network import DiffusionLM

    model, tok = engine.model, engine.tokenizer
    if not isinstance(model, DiffusionLM):
        return None
    ids = tok.encode(texts[0])
    cut = min(len(ids) // 2, model.cfg.max_prefix)
    sizes = (16,) if spec == QUICK else pass_floor.SIZES
    return pass_floor.pass_rows(model, ids[:cut][-model.cfg.max_prefix :], ids[cut:][: model.cfg.max_suffix],
                                tok.mask_id, reps=5 if spec == QUICK else 20, sizes=sizes)


_Key = tuple[str, int, int]  # (sampler, context size asked for, span)


@dataclass
class _Grid:
    """The rows to measure: the engines they run on, each (context, span) cell's input, and one runner per
    row (a sampler on a cell)."""

    plain: Engine  # the diffusion model, keeping no context between calls
    ar_plain: Engine | None  # the AR baseline, likewise (None without --ar-model)
    samplers: list[str]
    texts: list[str]  # the source files the inputs are cut from
    cells: list[tuple[int, int, str, str]]  # (context, span, prefix text, suffix text)
    runners: dict[_Key, Callable[[], int]]
    ctx_actual: dict[tuple[int, int], int]  # (context, span) -> prefix + suffix tokens the model sees


def _grid(engine: Engine, ar_engine: Engine | None, spec: BenchSpec, notes: list[str]) -> _Grid:
    """The rows of ``spec`` this model can run: spans and contexts clamped to its budgets, slow rows skipped on
    a CPU, the AR rows only with an AR engine; why any were changed goes to ``notes``."""
    from edit_engine.engine import ContextCacheConfig, Engine

    model, tok = engine.model, engine.tokenizer
    mc = model.cfg
    # Row engines keep no context between calls: every fill encodes its context, as a first request does.
    plain = Engine(model, tok, engine.sampler, engine.path, context_cache=ContextCacheConfig(budget_bytes=0))
    ar_plain = None
    if ar_engine is not None:
        ar_plain = Engine(ar_engine.model, ar_engine.tokenizer, ar_engine.sampler, ar_engine.path,
                          context_cache=ContextCacheConfig(budget_bytes=0))
    else:
        notes.append("ar rows skipped: no autoregressive baseline (--no-ar, or no --ar-model for this model)")
    samplers = [s for s in SAMPLERS if s != "ar" or ar_plain is not None]
    max_span = min([mc.max_canvas] + ([ar_plain.model.cfg.max_canvas] if ar_plain is not None else []))
    spans = sorted({min(s, max_span) for s in spec.spans})
    if spans != sorted(set(spec.spans)):
        notes.append(f"spans clamped to the model's max_canvas ({max_span})")
    max_ctx = mc.max_prefix + mc.max_suffix
    contexts = sorted({min(c, max_ctx) for c in spec.contexts})
    if contexts != sorted(set(spec.contexts)):
        notes.append(f"contexts clamped to the model's max_prefix + max_suffix ({max_ctx})")
    texts = _sources(spec.seed)
    rng = random.Random(spec.seed)
    cells = [(c, s, *_hole(engine, texts, *_split(engine, c), s, rng)) for c in contexts for s in spans]
    slow = model.device.type == "cpu"

    def skipped(n: str, c: int, s: int) -> bool:
        return slow and n in ("naive", "nocache") and c >= spec.slow_from_context and s > spec.slow_max_span

    runners = {(n, c, s): _runner(n, plain, ar_plain, pre, suf, s)
               for c, s, pre, suf in cells for n in samplers if not skipped(n, c, s)}
    if any(skipped(n, c, s) for c, s, _, _ in cells for n in samplers):
        notes.append(f"naive and nocache: spans above {spec.slow_max_span} skipped at contexts of "
                     f"{spec.slow_from_context}+ tokens on the CPU (one full forward pass per token)")
    ctx_actual = {}
    for c, s, pre, suf in cells:
        p_ids, s_ids = plain.context_ids(pre, suf)
        ctx_actual[(c, s)] = len(p_ids) + len(s_ids)
    return _Grid(plain, ar_plain, samplers, texts, cells, runners, ctx_actual)


def _measure(grid: _Grid, spec: BenchSpec, dev: torch.device, log: Callable[[str], None],
             ) -> tuple[dict[_Key, list[float]], dict[_Key, list[int]]]:
    """Time every row: ``spec.reps`` rounds over the cells, the samplers in a rotated order each round, a row
    stopping after ``spec.reps`` runs or ``spec.row_budget_s`` of them. Returns each row's times (ms) and
    forward passes, run by run."""
    samplers, runners = grid.samplers, grid.runners
    times: dict[_Key, list[float]] = {k: [] for k in runners}
    stats: dict[_Key, list[int]] = {k: [] for k in runners}  # nfe per run
    for rep in range(spec.reps):
        for c, s, _, _ in grid.cells:
            r = rep % len(samplers)
            order = samplers[r:] + samplers[:r]  # rotated every round: no sampler always goes first
            for n in order:
                key = (n, c, s)
                if key not in runners:
                    continue
                done = len(times[key]) >= spec.reps or sum(times[key]) >= spec.row_budget_s * 1e3
                if times[key] and done:
                    continue
                _sync(dev)
                t0 = time.perf_counter()
                nfe = runners[key]()
                _sync(dev)
                times[key].append((time.perf_counter() - t0) * 1e3)
                stats[key].append(nfe)
                if rep == 0:
                    log(f"{n:>7} context {c:>5} span {s:>4}: {times[key][-1]:9.1f} ms, nfe {nfe}")
    return times, stats


def _keystroke(engine: Engine, spec: BenchSpec, texts: list[str]) -> dict[str, Any]:
    """Type ``spec.line_chars`` characters of a real line into a document, one at a time, completing after
    each keystroke (``Engine.complete``, planner span, no repair rounds) with the per-document cache and
    without."""
    from edit_engine.engine import ContextCacheConfig, Engine

    model, tok = engine.model, engine.tokenizer
    doc = _typing_doc(engine, spec, texts)
    before, indent, line, after = doc.before, doc.indent, doc.line, doc.after
    cached = Engine(model, tok, engine.sampler, engine.path, context_cache=ContextCacheConfig())
    plain = Engine(model, tok, engine.sampler, engine.path, context_cache=ContextCacheConfig(budget_bytes=0))
    warm = before + indent + "x = 1" + after
    for e in (cached, plain):
        e.complete(warm, len(before + indent) + 5, uri="bench://warm.py", repair=False,
                   max_tokens=spec.keystroke_max_tokens)
    cached.contexts.stats.hits = cached.contexts.stats.partial = cached.contexts.stats.misses = 0
    cached.contexts.stats.tokens_reused = cached.contexts.stats.tokens_encoded = 0
    typed = _type_line(doc, [("cached", cached), ("uncached", plain)], spec.keystroke_max_tokens, model.device)
    ms, ctx_ms, nfe, fills = typed.ms, typed.ctx_ms, typed.nfe, typed.fills
    identical = sum(fills[("cached", j)] == fills[("uncached", j)] and len(fills[("cached", j)]) == 1
                    for j in range(1, len(line) + 1))
    p_ids, s_ids = cached.context_ids(before + indent + line, after)
    st = cached.contexts.stats
    return {
        "line": line, "keystrokes": len(line), "context_tokens": len(p_ids) + len(s_ids),
        **{name: {"p50_ms": round(_pct(ms[name], 50), 2), "p95_ms": round(_pct(ms[name], 95), 2),
                  "context_p50_ms": round(_pct(ctx_ms[name], 50), 2),
                  "mean_nfe": round(sum(nfe[name]) / len(nfe[name]), 2)}
           for name in ms},
        "max_tokens": spec.keystroke_max_tokens,
        "cache": {"hits": st.hits, "partial": st.partial, "misses": st.misses,
                  "tokens_reused": st.tokens_reused, "tokens_encoded": st.tokens_encoded},
        "identical_fills": identical, "span_kinds": typed.kinds, "sources": typed.sources,
        "typed_through": typed.typed_through,
        "times_ms": {k: [round(t, 2) for t in v] for k, v in ms.items()},
    }


@dataclass(frozen=True)
class _TypingDoc:
    """The keystroke scenario's document: ``before + indent + line + after``, with ``line`` typed into it."""

    before: str  # the context before the line (whole lines)
    indent: str  # the typed line's indentation
    line: str  # the characters typed
    after: str  # a line break, then the context after the line


def _typing_doc(engine: Engine, spec: BenchSpec, texts: list[str]) -> _TypingDoc:
    """A code line of at least ``spec.line_chars`` characters, with the scenario's context on both sides, from
    the first source that has one (a random one of its lines, seeded by ``spec.seed``)."""
    tok = engine.tokenizer
    n_pre, n_suf = _split(engine, spec.keystroke_context)
    rng = random.Random(spec.seed + 1)
    doc = _TypingDoc("", "", "", "")
    for text in texts:
        lines = text.splitlines(keepends=True)
        starts, before_tokens = [0], [0]  # token counts line by line: close to the whole text's, and linear
        for ln in lines:
            starts.append(starts[-1] + len(ln))
            before_tokens.append(before_tokens[-1] + len(tok.encode(ln)))
        code = _code_lines(text)
        cands = []
        for i, ln in enumerate(lines):
            body = ln.strip()
            typed = body[: spec.line_chars]
            if len(body) < spec.line_chars or i not in code:
                continue
            # Every keystroke should leave a single-line span (the planner makes a block body after ":").
            if any(typed[:j].rstrip().endswith(":") for j in range(1, len(typed) + 1)):
                continue
            if before_tokens[i] >= n_pre + 16 and before_tokens[-1] - before_tokens[i + 1] >= n_suf + 16:
                cands.append(i)
        if cands:
            i = rng.choice(cands)
            ln = lines[i]
            doc = _TypingDoc(before=tok.decode(tok.encode(text[: starts[i]])[-n_pre:]),
                             indent=ln[: len(ln) - len(ln.lstrip())], line=ln.strip()[: spec.line_chars],
                             after="\n" + tok.decode(tok.encode(text[starts[i + 1] :])[:n_suf]))
            break
    if not doc.line:
        raise UserError(f"no source line of {spec.line_chars} characters with enough context")
    return doc


@dataclass
class _Typed:
    """What typing the line recorded, per engine name: each fill's time, its context-encoding time and forward
    passes; the distinct fills at each keystroke (by engine name and characters typed); and the span kinds of
    the cached engine's first round."""

    ms: dict[str, list[float]] = field(default_factory=lambda: {"cached": [], "uncached": []})
    ctx_ms: dict[str, list[float]] = field(default_factory=lambda: {"cached": [], "uncached": []})
    nfe: dict[str, list[int]] = field(default_factory=lambda: {"cached": [], "uncached": []})
    fills: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)  # who wrote the cached engine's first-round fills
    typed_through: dict[str, int] = field(default_factory=lambda: {"cached": 0, "uncached": 0})  # no pass run


def _type_line(doc: _TypingDoc, order: list[tuple[str, Engine]], max_tokens: int, dev: torch.device) -> _Typed:
    """Type ``doc.line`` with each engine in turn, completing after every keystroke, for ``ROUNDS`` rounds."""
    before, indent, line, after = doc.before, doc.indent, doc.line, doc.after
    rec = _Typed()
    # Each engine types the whole line, as one editor session would (interleaving the two engines keystroke by
    # keystroke would let the uncached one's full encodes evict the cached one's working set between its
    # keystrokes, which no real session does); two rounds, in both orders, share the machine's slow phases.
    for rnd in range(ROUNDS):
        for name, e in order if rnd % 2 == 0 else order[::-1]:
            for j in range(1, len(line) + 1):
                text = before + indent + line[:j] + after
                off = len(before + indent) + j
                _sync(dev)
                t0 = time.perf_counter()
                c = e.complete(text, off, uri=KEYSTROKE_URI, repair=False, max_tokens=max_tokens)
                _sync(dev)
                rec.ms[name].append((time.perf_counter() - t0) * 1e3)
                rec.ctx_ms[name].append(c.timings.get("context", 0.0))
                rec.sources[c.source] = rec.sources.get(c.source, 0) + (name == "cached" and rnd == 0)
                rec.nfe[name].append(c.nfe)
                rec.typed_through[name] += c.nfe == 0
                rec.fills.setdefault((name, j), set()).add(c.text)
                if name == "cached" and rnd == 0:
                    rec.kinds[c.kind] = rec.kinds.get(c.kind, 0) + 1
    return rec


def _code_lines(text: str) -> set[int]:
    """0-based numbers of the lines that start with a name (code, not a comment or a docstring's inside)."""
    first: dict[int, int] = {}
    try:
        for t in tokenize.generate_tokens(io.StringIO(text).readline):
            if t.type not in (tokenize.INDENT, tokenize.DEDENT, tokenize.NL, tokenize.NEWLINE):
                first.setdefault(t.start[0] - 1, t.type)
    except (tokenize.TokenError, SyntaxError):
        return set()
    return {i for i, kind in first.items() if kind == tokenize.NAME}


def _machine(device: torch.device) -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out: dict[str, Any] = {
        "cpu": cpu, "cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
        "python": platform.python_version(), "device": str(device),
        "load_avg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def table(result: dict[str, Any]) -> str:
    """The rows and the keystroke scenario as a text table."""
    head = ("sampler", "context", "span", "p50 ms", "p95 ms", "nfe/token", "tokens/s", "reps")
    lines = ["  ".join(f"{h:>9}" for h in head)]
    for r in result["rows"]:
        vals = (r["sampler"], r["context_tokens"], r["span_tokens"], f"{r['p50_ms']:.1f}",
                f"{r['p95_ms']:.1f}", f"{r['nfe_per_token']:.3f}", f"{r['tokens_per_s']:.1f}", r["reps"])
        lines.append("  ".join(f"{v:>9}" for v in vals))
    k = result["keystroke"]
    lines.append("")
    lines.append(f"keystroke: typed {k['keystrokes']} characters ({k['line']!r}) with {k['context_tokens']} "
                 f"context tokens; fill after each (Engine.complete, <= {k['max_tokens']} tokens, no repair)")
    for name in ("cached", "uncached"):
        v = k[name]
        lines.append(f"  {name:>8}: p50 {v['p50_ms']:.1f} ms, p95 {v['p95_ms']:.1f} ms (context encoding p50 "
                     f"{v['context_p50_ms']:.1f} ms; {v['mean_nfe']:.1f} forward passes per fill)")
    c = k["cache"]
    lines.append(f"  cache: {c['hits']} hits, {c['partial']} partial, {c['misses']} misses; tokens reused "
                 f"{c['tokens_reused']}, encoded {c['tokens_encoded']}; identical fills "
                 f"{k['identical_fills']}/{k['keystrokes']}")
    if result.get("pass"):
        from edit_engine.decoding.pass_floor import table as pass_table

        lines.append("")
        lines.extend(pass_table(result["pass"]))
    m = result["machine"]
    lines.append(f"machine: {m['cpu']}, {m['threads']} threads, torch {m['torch']}, {m['device']}"
                 + (f" ({m['gpu']})" if "gpu" in m else ""))
    lines.extend(f"note: {n}" for n in result["notes"])
    return "\n".join(lines)
