"""Score fills on a benchmark: pass@1 by execution (HumanEval-infilling) or exact match (SantaCoder-FIM).

A *filler* turns a task into a fill: the model (predicted length, the real setting, or oracle length, which is
given the true token count and so leaks part of the answer), the canonical solution (the harness's self-test:
must score 1.0) or the empty string (the floor: what a fill that adds nothing scores).

Single-line benchmarks keep the fill's first line (HumanEval single-line: up to and including its newline, as
the canonical holes are; SantaCoder-FIM: up to the newline), as an editor's single-line completion would;
``truncate=False`` scores the raw fill. Greedy decoding, one sample per task: pass@1 is the share that pass.
"""

from __future__ import annotations

import ast
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from edit_engine.eval.benchmarks import Task
from edit_engine.eval.execution import ExecResult, Limits, run_program, sandbox_layers
from edit_engine.train.progress import Progress

if TYPE_CHECKING:
    from edit_engine.engine import Engine


@dataclass(frozen=True)
class Fill:
    text: str
    nfe: int = 0
    tokens: int = 0
    elapsed_ms: float = 0.0
    stop_reason: str = ""
    salvaged: bool = False  # the editor's path cut a fill that still broke the parse back (repair.salvage)


Filler = Callable[[Task], Fill]


def canonical_filler(task: Task) -> Fill:
    return Fill(task.canonical)


def empty_filler(task: Task) -> Fill:
    return Fill("")


def model_filler(engine: Engine, oracle: bool = False, line_stop: bool = True, **overrides: Any) -> Filler:
    """Fills from ``engine.infill``. Oracle length: the fill has exactly the true hole's token count (canvas of
    that size, pads forbidden); an empty true hole is answered with "" without a model call. ``line_stop``:
    single-line tasks end denoising once the fill's first line is decided (the sampler's line stop; the line
    scored is the same, the fill is cut after its newline, and the counters are the passes actually run)."""

    def fill(task: Task) -> Fill:
        kw = dict(overrides)
        if line_stop and task.single_line:
            kw.setdefault("line_stop", True)
        max_tokens = None
        if oracle:
            n = len(engine.tokenizer.encode(task.canonical))
            if n == 0:
                return Fill("", stop_reason="complete")
            max_tokens = n
            kw["initial_canvas"] = n
            kw["min_tokens"] = n  # exactly the true length: no pad anywhere (the length rule has nothing to do)
        # Oracle length counts the true hole's tokens: no token healing, which would write part of the prefix.
        r = engine.infill(task.prefix, task.suffix, language=task.language, max_tokens=max_tokens, heal=not oracle,
                          **kw)
        return Fill(r.text, r.nfe, r.tokens, r.elapsed_ms, r.stop_reason)

    return fill


def document_filler(engine: Engine, whole_lines: bool, line_stop: bool = True, repair: bool = True,
                    **overrides: Any) -> Filler:
    """Fills from ``engine.complete``: what an editor gets, with the planner choosing the span, post-processing
    (indentation, brackets) and the parse check with its repair rounds (``repair``). The document is prefix +
    suffix with the cursor between them; ``whole_lines`` (HumanEval's holes are whole lines, with their
    newline) puts the cursor on an empty line of its own, as a user would type a new line. The completion
    scored is what the edit puts between the task's prefix and suffix."""

    def fill(task: Task) -> Fill:
        kw = dict(overrides)
        if not line_stop:
            kw.setdefault("line_stop", False)  # else single-line plans stop at their line, as in the editor
        elif task.single_line:
            kw.setdefault("line_stop", True)
        gap = "\n" if whole_lines and (not task.prefix or task.prefix.endswith("\n")) else ""
        text = task.prefix + gap + task.suffix
        c = engine.complete(text, len(task.prefix), language=task.language, repair=repair, **kw)
        new = text[: c.start] + c.text + text[c.end :]
        if not (len(new) >= len(task.prefix) + len(task.suffix) and new.startswith(task.prefix)
                and new.endswith(task.suffix)):  # the plan replaced part of the task's context: no fill
            return Fill("", c.nfe, c.tokens, c.elapsed_ms, "span")
        completion = new[len(task.prefix) : len(new) - len(task.suffix)]
        return Fill(completion, c.nfe, c.tokens, c.elapsed_ms, c.stop_reason, "salvage" in c.timings)

    return fill


def first_line(text: str, keep_newline: bool) -> str:
    nl = text.find("\n")
    if nl < 0:
        return text
    return text[: nl + 1] if keep_newline else text[:nl]


# Comment line starts by benchmark language (``has_code``): line comments, and the lines of a block comment.
COMMENT_STARTS = {"python": ("#",), "javascript": ("//", "/*", "*"), "java": ("//", "/*", "*")}


def has_code(fill: str, language: str = "python") -> bool:
    """Whether ``fill`` holds code: a line that is neither blank nor a line comment. A comment-only fill, like an
    empty one, parses almost anywhere, so the parse rate alone rewards a model that answers with comments
    (the packaged model often does: ``# the the ...``); ``code_parse_ok`` counts only fills with code."""
    marks = COMMENT_STARTS.get(language, ("#",))
    return any(ln.strip() and not ln.lstrip().startswith(marks) for ln in fill.splitlines())


def edit_similarity(fill: str, canonical: str) -> float:
    """Edit similarity of two holes, surrounding whitespace stripped: 1 - Levenshtein distance / the longer
    length (1.0 for equal text, 0.0 when nothing is shared), the line-level completion measure of CodeXGLUE and
    later code-completion benchmarks. Graded, so near misses count and a junk fill that merely parses does not."""
    a, b = fill.strip(), canonical.strip()
    if a == b:
        return 1.0
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return 1.0 - prev[-1] / len(a)


def parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: null bytes
        return False
    return True


@dataclass
class TaskResult:
    task_id: str
    completion: str  # the fill as scored (after single-line truncation)
    passed: bool
    status: str  # passed | failed | timeout | error (execution); match | mismatch (exact match)
    parse_ok: bool | None  # Python: prefix + completion + suffix parses; None for other languages
    nfe: int
    tokens: int
    elapsed_ms: float
    stop_reason: str
    raw: str  # the fill before truncation
    edit_sim: float = 0.0  # ``edit_similarity`` of the scored fill and the true hole
    salvaged: bool = False  # the editor's path cut this fill back to a prefix that parses (``Fill.salvaged``)


@dataclass
class Report:
    benchmark: str
    language: str
    mode: str  # predicted | oracle (hole length)
    fill: str  # model | document | document-no-repair (the editor path) | canonical | empty
    n: int
    metric: str  # pass_at_1 | exact_match
    score: float
    parse_ok: float | None  # share of Python programs (prefix + fill + suffix) that parse
    empty_share: float  # share of fills that are empty or whitespace only
    nfe_per_token: float  # forward passes per generated token (model fills; 0 otherwise)
    ms_per_task: float  # mean engine time per task
    tokens_per_task: float
    statuses: dict[str, int]
    stop_reasons: dict[str, int]
    truncate: bool
    model: str = ""
    wall_s: float = 0.0
    # Of the Python programs, the share that parse with a fill holding code (``has_code``: not blank, not only
    # comments); and the share of fills that are comments only. None/0 without a Python benchmark.
    code_parse_ok: float | None = None
    comment_share: float = 0.0
    edit_sim: float = 0.0  # mean ``edit_similarity`` of the scored fills and the true holes
    # share of fills the editor's path cut back because even the best repair round broke the parse
    salvaged_share: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d[self.metric] = round(self.score, 4)
        del d["score"], d["extra"]
        for k in ("parse_ok", "code_parse_ok", "edit_sim", "empty_share", "comment_share", "salvaged_share", "nfe_per_token",
                  "ms_per_task", "tokens_per_task", "wall_s"):
            if isinstance(d[k], float):
                d[k] = round(d[k], 4)
        return {**d, **self.extra}

    def table(self) -> str:
        rows = [
            ("benchmark", f"{self.benchmark}" + (f" ({self.language})" if self.metric == "exact_match" else "")),
            ("model", self.model or "-"), ("fill", self.fill), ("length mode", self.mode),
            ("tasks", str(self.n)), (self.metric, f"{100 * self.score:.1f}%"),
            ("parse_ok", "-" if self.parse_ok is None else f"{100 * self.parse_ok:.1f}%"),
            ("code_parse_ok", "-" if self.code_parse_ok is None else f"{100 * self.code_parse_ok:.1f}%"),
            ("edit_sim", f"{100 * self.edit_sim:.1f}"),
            ("empty_share", f"{100 * self.empty_share:.1f}%"),
            ("comment_share", f"{100 * self.comment_share:.1f}%"),
            ("salvaged_share", f"{100 * self.salvaged_share:.1f}%"),
            ("nfe_per_token", f"{self.nfe_per_token:.3f}"), ("ms_per_task", f"{self.ms_per_task:.1f}"),
            ("tokens_per_task", f"{self.tokens_per_task:.1f}"),
            ("statuses", ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))),
            ("stop_reasons", ", ".join(f"{k} {v}" for k, v in sorted(self.stop_reasons.items())) or "-"),
            ("wall_s", f"{self.wall_s:.1f}"),
        ]
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def _score_exact(task: Task, completion: str) -> tuple[bool, str]:
    ok = completion.strip() == task.canonical.strip()
    return ok, "match" if ok else "mismatch"


def evaluate(tasks: Sequence[Task], filler: Filler, *, benchmark: str = "", mode: str = "predicted",
             fill_kind: str = "model", truncate: bool = True, limits: Limits | None = None, workers: int = 2,
             isolate: bool = True, progress: bool = True, model: str = "",
             on_result: Callable[[TaskResult], None] | None = None) -> tuple[Report, list[TaskResult]]:
    """Fill every task, score it, and summarise. Programs run on ``workers`` threads while the next fills are
    generated."""
    # a tqdm bar on a terminal; in a log, a plain line every half minute and one at the end
    bar = Progress(len(tasks), benchmark or "eval", "task") if progress else None
    t0 = time.perf_counter()
    fills: list[Fill] = []
    completions: list[str] = []
    futures: list[Future[ExecResult] | None] = []
    results: list[TaskResult] = []

    def finish(i: int) -> None:
        """Score task i (its program has run, or it is scored by exact match) and report it."""
        task, f, text, fut = tasks[i], fills[i], completions[i], futures[i]
        if fut is not None:
            ex = fut.result()
            passed, status = ex.passed, ex.status
        else:
            passed, status = _score_exact(task, text)
        po = parses(task.prefix + text + task.suffix) if task.language == "python" else None
        r = TaskResult(task.task_id, text, passed, status, po, f.nfe, f.tokens, f.elapsed_ms, f.stop_reason,
                       f.text, edit_similarity(text, task.canonical), f.salvaged)
        results.append(r)
        if on_result:
            on_result(r)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for task in tasks:
            f = filler(task)
            text = first_line(f.text, keep_newline=bool(task.test)) if truncate and task.single_line else f.text
            fills.append(f)
            completions.append(text)
            futures.append(pool.submit(run_program, task.program(text), limits, isolate)
                           if task.scored_by_execution else None)
            # Results are reported in task order as soon as they are known (so --out grows during a run).
            while len(results) < len(fills) and (futures[len(results)] is None
                                                 or futures[len(results)].done()):  # type: ignore[union-attr]
                finish(len(results))
            if bar:
                bar.update(len(fills), f"filled, {len(results)} scored")
        while len(results) < len(tasks):
            finish(len(results))
            if bar:
                bar.update(len(results), "scored")
    if bar:
        bar.close()
    n = len(results)
    parse = [r.parse_ok for r in results if r.parse_ok is not None]
    lang = tasks[0].language if tasks else ""
    code = [bool(r.parse_ok) and has_code(r.completion, lang) for r in results if r.parse_ok is not None]
    comments = sum(bool(r.completion.strip()) and not has_code(r.completion, lang) for r in results)
    tok = sum(r.tokens for r in results)
    report = Report(
        benchmark=benchmark, language=tasks[0].language if tasks else "", mode=mode, fill=fill_kind, n=n,
        metric="pass_at_1" if tasks and tasks[0].scored_by_execution else "exact_match",
        score=sum(r.passed for r in results) / max(1, n),
        parse_ok=(sum(parse) / len(parse)) if parse else None,
        empty_share=sum(not r.completion.strip() for r in results) / max(1, n),
        nfe_per_token=sum(r.nfe for r in results) / tok if tok else 0.0,
        ms_per_task=sum(r.elapsed_ms for r in results) / max(1, n),
        tokens_per_task=tok / max(1, n),
        statuses=dict(Counter(r.status for r in results)),
        stop_reasons=dict(Counter(r.stop_reason for r in results if r.stop_reason)),
        truncate=truncate, model=model, wall_s=time.perf_counter() - t0,
        code_parse_ok=(sum(code) / len(code)) if code else None, comment_share=comments / max(1, n),
        edit_sim=sum(r.edit_sim for r in results) / max(1, n),
        salvaged_share=sum(r.salvaged for r in results) / max(1, n),
        # the sandbox layers the executed programs ran under (what the scores' safety rests on)
        extra={"sandbox": list(sandbox_layers())} if any(t.scored_by_execution for t in tasks) and isolate else {},
    )
    return report, results
