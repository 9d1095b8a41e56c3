"""``edit-engine eval``: score a model on an infilling benchmark, or measure its context gap.

    edit-engine eval --benchmark humaneval-single --limit 200 --json
    edit-engine eval --benchmark santacoder-fim --language python --limit 200
    edit-engine eval --benchmark humaneval-multi --canonical --limit 20     # self-test: must print 100.0%
    edit-engine eval --benchmark apply --out apply.json      # apply edit: marker snippets merged into files
    edit-engine eval --benchmark next-edit [--fill rename-baseline] --out next.json    # next edit
    edit-engine eval --benchmark next-edit-history [--repo DIR]   # next edit, cases from a repository's history
    edit-engine eval --benchmark next-edit-releases --data runs/release_edits   # next edit, held out: PyPI releases
    edit-engine eval --benchmark next-edit-elsewhere --data runs/release_edits  # next edit in the other open files
    edit-engine eval --benchmark real-code --data runs/realcode --split dev [--fill copy-baseline|empty]
    edit-engine eval --context-gap --limit 64

A progress bar goes to stderr; stdout gets a table, or with ``--json`` one JSON object on its last line.
``--plot DIR`` also draws the score and the fill times by hole kind as PNG files (``plots.eval_plots``).
Heavy imports (torch, the engine) happen inside the handler.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edit_engine.cli.args import UserError, add_dtype_arg, add_sampler_args, sampler_overrides
from edit_engine.eval.benchmarks import (
    APPLY_BENCHMARKS,
    BENCHMARKS,
    NEXT_EDIT_BENCHMARKS,
    REAL_CODE_BENCHMARKS,
    SANTACODER_LANGUAGES,
    TYPING_BENCHMARKS,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sized

    from edit_engine.eval.benchmarks import Task
    from edit_engine.eval.harness import Filler, Report, TaskResult
    from edit_engine.eval.next_edit_set import Filler as NextEditFiller
    from edit_engine.eval.real_code import Filler as RealCodeFiller
    from edit_engine.eval.real_code import Outcome
    from edit_engine.train.progress import Progress


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("eval", help="score a model on an infilling benchmark (or --context-gap)")
    p.set_defaults(handler=_eval)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--benchmark", choices=BENCHMARKS, help="benchmark to run")
    what.add_argument("--context-gap", action="store_true",
                      help="hole-token loss with real vs shuffled context on held-out corpus files")
    p.add_argument("--language", default="python", choices=(*SANTACODER_LANGUAGES, *TYPING_LANGUAGES),
                   help="santacoder-fim language (HumanEval is Python only); typing: one language or all")
    p.add_argument("--data", help="benchmark directory (default: ../shared/benchmarks beside the repository; "
                                  "next-edit-releases, next-edit-elsewhere: the set benchmarks/release_edits.py built, default "
                                  "runs/release_edits)")
    p.add_argument("--limit", type=int, help="first N tasks (context gap: examples, default 64)")
    p.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    add_dtype_arg(p)
    p.add_argument("--oracle-length", action="store_true",
                   help="give the model the true hole length in tokens (leaks the answer; papers mark it)")
    add_sampler_args(p)
    fill = p.add_mutually_exclusive_group()
    fill.add_argument("--canonical", action="store_true", help="self-test: fill with the canonical solutions")
    fill.add_argument("--empty", action="store_true", help="floor: fill every hole with the empty string")
    p.add_argument("--no-truncate", action="store_true",
                   help="score single-line benchmarks on the raw fill instead of its first line")
    p.add_argument("--no-line-stop", action="store_true",
                   help="single-line benchmarks: denoise the whole fill instead of stopping once its first line "
                        "is decided (the scored line is the same; only the passes differ)")
    p.add_argument("--document", action="store_true",
                   help="fill through the editor's path (Engine.complete: planner, post-processing, parse check "
                   "and repair rounds) instead of the bare model (Engine.infill)")
    p.add_argument("--no-repair", action="store_true", help="with --document: no repair rounds")
    p.add_argument("--fill", choices=("engine", "patterns", "rename-baseline", "copy-baseline", "empty", "memory",
                                      "lsp", "none"),
                   default="engine",
                   help="next-edit: the engine (patterns, then the model), its patterns alone (patterns), or the "
                        "model-free baseline (rename-baseline: every word the history replaced one-for-one, "
                        "replaced in the region); real-code: the engine's Engine.complete, the model-free "
                        "copy-baseline (the span whose surroundings best match the hole's), or empty; typing: the "
                        "engine, the memory of code alone, the language server, or none")
    p.add_argument("--split", choices=("dev", "test"),
                   help="real-code: the cases of this split (default test; dev is the one to tune on)")
    p.add_argument("--no-related", action="store_true",
                   help="real-code: give no related files (the engine and the copy baseline see the document only)")
    p.add_argument("--edit-model", metavar="DIR|none",
                   help="next-edit: the checkpoint that writes the model's edits (default: the edit model packaged "
                        "beside the packaged model; none: the fill model rewrites)")
    p.add_argument("--region", choices=("target", "cursor"), default="target",
                   help="next-edit: give the engine the case's region around the target (target: the location "
                        "told, the set's setup) or none (cursor: as an editor asks; the engine finds where)")
    p.add_argument("--repo", help="next-edit-history: the git repository whose history gives the cases "
                                  "(default: the one this package is in)")
    p.add_argument("--timeout", type=float, default=3.0, help="CPU seconds per program (default 3)")
    p.add_argument("--workers", type=int, default=2, help="programs run at once (default 2)")
    p.add_argument("--corpus", nargs="+", help="context gap: corpus roots (default: the checkpoint's own)")
    p.add_argument("--threads", type=int, default=0, help="torch threads for the model (0 = default)")
    p.add_argument("--out", help="write per-task results here (JSON lines; apply benchmarks: one JSON object)")
    p.add_argument("--json", action="store_true", help="print one JSON object (last line of stdout)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--analysis", action="store_true",
                   help="editor's path and real-code: the novel-name penalty spares the names jedi knows at the cursor")
    p.add_argument("--analysis-ms", type=float, default=10.0,
                   help="with --analysis: how long each fill waits for jedi (default 10)")
    typing = p.add_argument_group("typing", "the typing replay (--benchmark typing; --out writes its report)")
    typing.add_argument("--modes", default="whole,line,word", help="accept modes to replay (comma-separated)")
    typing.add_argument("--no-memory", action="store_true", help="the engine without its memory of code")
    typing.add_argument("--no-workspace", action="store_true", help="no workspace (the case's package) for the memory")
    typing.add_argument("--show-threshold", type=float, help="the engine's show threshold (0: show every answer)")
    typing.add_argument("--draft", metavar="MIN_PROB,MIN_SCORE[,LOCAL_PROB]",
                        help="the same thresholds for every drafted token instead of the engine's rule (LOCAL_PROB: a "
                        "number or none, the default; 0.7,0,0.6 is the policy before per-place thresholds)")
    typing.add_argument("--record", metavar="PATH", help="every shown suggestion of the line mode (gate_fit's input)")
    typing.add_argument("--no-cache", action="store_true", help="ask again in each mode")
    p.add_argument("--plot", metavar="DIR",
                   help="also write PNG plots to DIR: eval_score.png, eval_latency.png (needs matplotlib)")


TYPING_LANGUAGES = ("typescript", "go", "rust", "all")  # besides SANTACODER_LANGUAGES' python, javascript


def _typing(a: argparse.Namespace) -> int:
    """``--benchmark typing``: the typing replay (``typing_replay``) with this command's flags."""
    from edit_engine.eval import typing_replay

    if a.language == "java":
        raise UserError("--benchmark typing: --language python, javascript, typescript, go, rust or all")
    fill = "engine" if a.fill in (None, "engine") else a.fill
    if fill not in ("engine", "memory", "lsp", "none"):
        raise UserError(f"--benchmark typing: --fill engine, memory, lsp or none, not {a.fill}")
    args = argparse.Namespace(
        data=a.data or "runs/typing", split=a.split or "dev", language=a.language,
        limit=a.limit if a.limit is not None else typing_replay.DEFAULT_LIMIT, fill=fill, model=a.model,
        threads=a.threads or None, modes=a.modes, no_cache=a.no_cache, json=a.out, no_memory=a.no_memory,
        no_workspace=a.no_workspace, show_threshold=a.show_threshold, draft=a.draft, record=a.record,
        no_progress=a.no_progress)
    return typing_replay.run_from_args(args)


def _eval(a: argparse.Namespace) -> int:
    if a.benchmark in TYPING_BENCHMARKS:  # its --limit is per language, 0 for all
        return _typing(a)
    if a.limit is not None and a.limit < 1:
        raise UserError("--limit must be >= 1")
    if a.context_gap:
        if a.document or a.no_repair or a.plot:
            raise UserError("--document, --no-repair and --plot fill or draw benchmark tasks; they do not go with "
                            "--context-gap")
        return _context_gap(a)
    if a.benchmark in APPLY_BENCHMARKS:
        return _apply(a)
    if a.benchmark in NEXT_EDIT_BENCHMARKS:
        return _next_edit(a)
    if a.benchmark in REAL_CODE_BENCHMARKS:
        return _real_code(a)
    if a.split is not None or a.no_related:
        raise UserError("--split and --no-related go with --benchmark real-code")
    if a.plot:  # a one-line error now, before the run, when matplotlib is missing
        from edit_engine.cli.plots import require

        require(UserError)
    from edit_engine.eval.benchmarks import BenchmarkError, load

    _check_fill_args(a)
    try:
        tasks = load(a.benchmark, a.data, a.language, a.limit)
    except BenchmarkError as e:
        raise UserError(str(e)) from e
    filling = _filling(a)
    report, results = _score(a, tasks, filling)
    if a.threshold is not None:
        report.extra["threshold"] = a.threshold
    if filling.sampler is not None:
        report.extra["sampler"] = filling.sampler
    if filling.dtype is not None:
        report.extra["dtype"] = filling.dtype
    if a.json:
        print(json.dumps(report.to_json()))
    else:
        print(report.table())
    if a.plot:
        _plot(a.plot, report, tasks, results)
    return 0


def _apply(a: argparse.Namespace) -> int:
    """``--benchmark apply`` (the next-edit cases) or ``apply-synthetic`` (this package's sources): merge each
    case's marker snippet with ``Engine.apply`` and score exact match and latency (``apply_set``)."""
    if a.document or a.canonical or a.empty or a.oracle_length or a.plot:
        raise UserError("--document, --canonical, --empty, --oracle-length and --plot score fills; they do not go "
                        f"with --benchmark {a.benchmark}")
    from edit_engine.engine import Engine
    from edit_engine.eval.apply_set import next_edit_cases, report, run, synthetic_cases, table
    from edit_engine.eval.benchmarks import BenchmarkError

    try:
        cases = next_edit_cases(a.data, a.limit) if a.benchmark == "apply" else synthetic_cases(limit=a.limit)
    except BenchmarkError as e:
        raise UserError(str(e)) from e
    engine = Engine.load(a.model, threads=a.threads or None, dtype=a.dtype)
    outcomes = _run_cases(a, a.benchmark, cases, lambda tick: run(cases, engine.apply, on_result=tick))
    return _write_report(a, {**report(a.benchmark, outcomes), "model": str(engine.path or "")}, table)


def _next_edit(a: argparse.Namespace) -> int:
    """``--benchmark next-edit``: propose each case's next edit (``--fill``) and score it (``next_edit_set``)."""
    if a.document or a.canonical or a.empty or a.oracle_length or a.plot:
        raise UserError("--document, --canonical, --empty, --oracle-length and --plot score fills; they do not go "
                        "with --benchmark next-edit")
    from edit_engine.eval.benchmarks import BenchmarkError
    from edit_engine.eval.next_edit_history import history_cases
    from edit_engine.eval.next_edit_set import (
        FILLS,
        engine_filler,
        load_cases,
        rename_baseline,
        report,
        run,
        table,
    )
    from edit_engine.eval.release_edits import load_cases as release_cases
    from edit_engine.eval.release_edits import load_finals

    if a.fill not in FILLS:
        raise UserError(f"--fill {a.fill} does not go with next-edit; choose from {', '.join(FILLS)}")
    if a.benchmark == "next-edit-elsewhere":
        return _next_edit_elsewhere(a)
    try:
        if a.benchmark == "next-edit":
            cases = load_cases(a.data, a.limit)
        elif a.benchmark == "next-edit-releases":
            cases = release_cases(a.data, a.limit)
        else:
            cases = history_cases(a.repo, a.limit)
    except BenchmarkError as e:
        raise UserError(str(e)) from e
    model = ""
    fill: NextEditFiller
    if a.fill == "rename-baseline":
        fill = rename_baseline
    else:
        from edit_engine.engine import Engine

        edit_model = False if a.edit_model == "none" else a.edit_model
        engine = Engine.load(a.model, threads=a.threads or None, dtype=a.dtype, edit_model=edit_model)
        engine.warm_up()
        fill, model = engine_filler(engine, use_model=a.fill == "engine", region=a.region), str(engine.path or "")
        if a.fill == "engine" and engine.edits.path is not None:
            model += f" (edits: {engine.edits.path})"
    finals = load_finals(a.data) if a.benchmark == "next-edit-releases" else {}
    outcomes = _run_cases(a, "next-edit", cases, lambda tick: run(cases, fill, on_result=tick, finals=finals))
    rep = report(a.benchmark, a.fill, outcomes, len([c for c in cases if c.case_id in finals]))
    return _write_report(a, {**rep, "model": model, "region": a.region}, table)


def _next_edit_elsewhere(a: argparse.Namespace) -> int:
    """``--benchmark next-edit-elsewhere``: a finished file's changes as the history, the release's other files
    open; scored by ``next_edit_elsewhere``."""
    from edit_engine.engine import Engine
    from edit_engine.eval import next_edit_elsewhere as elsewhere
    from edit_engine.eval.benchmarks import BenchmarkError

    if a.fill == "rename-baseline":
        raise UserError("--fill rename-baseline does not go with next-edit-elsewhere; choose engine or patterns")
    try:
        cases = elsewhere.load_cases(a.data, a.limit)
    except BenchmarkError as e:
        raise UserError(str(e)) from e
    edit_model = False if a.edit_model == "none" else a.edit_model
    engine = Engine.load(a.model, threads=a.threads or None, dtype=a.dtype, edit_model=edit_model)
    engine.warm_up()
    fill = elsewhere.engine_filler(engine, use_model=a.fill == "engine")
    outcomes = _run_cases(a, a.benchmark, cases, lambda tick: elsewhere.run(cases, fill, on_result=tick))
    return _write_report(a, {**elsewhere.report(outcomes), "model": str(engine.path or "")}, elsewhere.table)


def _real_code(a: argparse.Namespace) -> int:
    """``--benchmark real-code``: fill each case (``--fill``) at its cursor and score it (``real_code``)."""
    if a.document or a.canonical or a.oracle_length or a.plot:
        raise UserError("--document, --canonical, --oracle-length and --plot do not go with --benchmark real-code "
                        "(it always fills through the editor's path)")
    fill_name = "empty" if a.empty else a.fill
    from edit_engine.eval.real_code import (
        FILLS,
        copy_baseline,
        empty_filler,
        engine_filler,
        load_cases,
        run,
        summary,
        table,
    )

    if fill_name not in FILLS:
        raise UserError(f"--fill {fill_name} does not go with real-code; choose from {', '.join(FILLS)}")
    try:
        import rapidfuzz  # noqa: F401  (edit similarity)
    except ImportError as e:
        raise UserError("real-code needs rapidfuzz for edit similarity: pip install rapidfuzz") from e
    from edit_engine.eval.benchmarks import BenchmarkError
    from edit_engine.train.progress import Progress

    split = a.split or "test"
    try:
        cases = load_cases(a.data, split, a.limit, related=not a.no_related)
    except BenchmarkError as e:
        raise UserError(str(e)) from e
    model = ""
    fill: RealCodeFiller
    overrides = sampler_overrides(a) if fill_name == "engine" else {}
    if fill_name == "engine":
        from edit_engine.engine import Engine

        engine = Engine.load(a.model, threads=a.threads or None, dtype=a.dtype, analysis=a.analysis,
                             analysis_ms=a.analysis_ms)
        engine.warm_up()
        fill, model = engine_filler(engine, **overrides), str(engine.path or "")
    else:
        fill = copy_baseline if fill_name == "copy-baseline" else empty_filler
    bar = None if a.no_progress else Progress(len(cases), f"real-code {split}", "case")
    tick = _counter(bar)
    out = open(a.out, "w", encoding="utf-8") if a.out else None  # noqa: SIM115

    def write(o: Outcome) -> None:
        tick(o)
        if out is not None:
            from dataclasses import asdict

            out.write(json.dumps(asdict(o)) + "\n")
            out.flush()

    try:
        outcomes = run(cases, fill, on_result=write)
    finally:
        if out is not None:
            out.close()
        if bar is not None:
            bar.close()
    s = {**summary(split, fill_name, not a.no_related, outcomes), "model": model,
         **({"sampler_overrides": overrides} if overrides else {})}
    print(json.dumps(s) if a.json else table(s))
    return 0


def _plot(out_dir: str, report: Report, tasks: list[Task], results: list[TaskResult]) -> None:
    from edit_engine.cli.plots import eval_plots, hole_kind

    records = [{"benchmark": report.benchmark, "kind": hole_kind(t.canonical), "passed": r.passed,
                "elapsed_ms": r.elapsed_ms} for t, r in zip(tasks, results, strict=True)]
    paths = eval_plots(report.to_json(), records, out_dir)
    print("plots: " + ", ".join(map(str, paths)), file=sys.stderr)


def _check_fill_args(a: argparse.Namespace) -> None:
    """Reject benchmark flags that do not go together."""
    if a.timeout <= 0:
        raise UserError("--timeout must be > 0")
    if a.fill != "engine":
        raise UserError(f"--fill {a.fill} goes with --benchmark next-edit or real-code")
    if a.no_repair and not a.document:
        raise UserError("--no-repair goes with --document")
    if a.document and (a.canonical or a.empty):
        raise UserError("--document fills with the model; it does not go with --canonical or --empty")
    if a.document and a.oracle_length:
        raise UserError("--document and --oracle-length do not go together (the planner sizes the span)")


@dataclass
class _Filling:
    """How the tasks are filled (``harness`` filler and its report name), and what the report records of the
    model that fills them (none for ``--canonical`` and ``--empty``)."""

    filler: Filler
    kind: str
    model: str = ""
    sampler: dict[str, object] | None = None  # the effective sampler settings
    dtype: str | None = None


def _filling(a: argparse.Namespace) -> _Filling:
    """The filler the flags ask for: canonical, empty, the editor's path (``--document``) or the bare model."""
    from edit_engine.eval.harness import canonical_filler, document_filler, empty_filler, model_filler

    if a.canonical:
        return _Filling(canonical_filler, "canonical")
    if a.empty:
        return _Filling(empty_filler, "empty")
    from edit_engine.engine import Engine

    engine = Engine.load(a.model, threads=a.threads or None, dtype=a.dtype, analysis=a.analysis,
                         analysis_ms=a.analysis_ms)
    overrides = sampler_overrides(a)
    line_stop = not (a.no_line_stop or a.no_truncate)
    filler: Filler
    if a.document:
        filler = document_filler(engine, whole_lines=a.benchmark in ("humaneval-single", "humaneval-multi"),
                                 line_stop=line_stop,
                                 repair=not a.no_repair, **overrides)
        kind = "document" if not (a.no_repair or engine.is_ar) else "document-no-repair"  # AR: no repair
    else:
        filler, kind = model_filler(engine, oracle=a.oracle_length, line_stop=line_stop, **overrides), "model"
    eff = engine.sampler_for(overrides)  # the checkpoint's sampler.json with this command's overrides
    sampler_used = {k: getattr(eff, k) for k in ("threshold", "min_commit", "max_commit", "spread",
                                                  "pad_threshold", "floor_ramp", "novel_penalty")}
    return _Filling(filler, kind, str(engine.path or ""), sampler_used, engine.dtype)


def _score(a: argparse.Namespace, tasks: list[Task], filling: _Filling) -> tuple[Report, list[TaskResult]]:
    """Fill and run the tasks; with ``--out`` each task's result is written as it comes."""
    from edit_engine.eval.execution import Limits
    from edit_engine.eval.harness import evaluate

    out = open(a.out, "w", encoding="utf-8") if a.out else None  # noqa: SIM115

    def write(r: TaskResult) -> None:
        if out is not None:
            from dataclasses import asdict

            out.write(json.dumps(asdict(r)) + "\n")
            out.flush()

    try:
        report, results = evaluate(
            tasks, filling.filler, benchmark=a.benchmark, mode="oracle" if a.oracle_length else "predicted",
            fill_kind=filling.kind, truncate=not a.no_truncate, limits=Limits(timeout_s=a.timeout),
            workers=a.workers, progress=not a.no_progress, model=filling.model, on_result=write,
        )
    finally:
        if out is not None:
            out.close()
    return report, results


def _context_gap(a: argparse.Namespace) -> int:
    from pathlib import Path

    from edit_engine.engine import Engine
    from edit_engine.eval.context_gap import context_gap

    engine = Engine.load(a.model, threads=a.threads or None, dtype=a.dtype)
    try:
        r = context_gap(engine, limit=a.limit or 64, roots=[Path(c) for c in a.corpus] if a.corpus else None)
    except ValueError as e:
        raise UserError(str(e)) from e
    r = {"model": str(engine.path or ""), **r}
    if a.json:
        print(json.dumps(r))
    else:
        w = max(len(k) for k in r)
        for k, v in r.items():
            print(f"{k:<{w}}  {v:.4f}" if isinstance(v, float) else f"{k:<{w}}  {v}")
    sys.stdout.flush()
    return 0


def _run_cases(a: argparse.Namespace, label: str, cases: Sized,
               run: Callable[[Callable[[object], None]], list[Any]]) -> list[Any]:
    """The outcomes of ``run(on_result)`` over ``cases``, with a progress bar on stderr (unless
    ``--no-progress``) that moves one case on per result."""
    from edit_engine.train.progress import Progress

    bar = None if a.no_progress else Progress(len(cases), label, "case")
    outcomes = run(_counter(bar))
    if bar is not None:
        bar.close()
    return outcomes


def _write_report(a: argparse.Namespace, rep: dict[str, Any], table: Callable[[dict[str, Any]], str]) -> int:
    """Write the whole report to ``--out`` (JSON) and print its summary, the report without its per-case
    results (``--json``: as JSON; else as ``table`` draws it)."""
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(rep, f, indent=1)
    summary = {k: v for k, v in rep.items() if k != "results"}
    print(json.dumps(summary) if a.json else table(summary))
    return 0


def _counter(bar: Progress | None) -> Callable[[object], None]:
    """An ``on_result`` that moves ``bar`` one case on per result."""
    done = 0

    def tick(o: object) -> None:
        nonlocal done
        done += 1
        if bar is not None:
            bar.update(done)

    return tick
