"""The next-edit benchmark (``edit-engine eval --benchmark next-edit``): from a file, a cursor and the edits the
user just made (unified diffs), propose the next edit inside an editable region; score the region after it.

Cases are read unchanged from ``../shared/benchmarks/next-edit/next-edit.jsonl.gz`` (evaluation data only: never
trained or tuned on; its README defines the fields and the metrics). Each case is given to a *filler* with its
region (as the set defines it: the rows around the target), which answers with the region after its edit, or
nothing:

- ``engine``: ``Engine.next_edit`` (patterns first, the model second); ``patterns``: the same without the model;
- ``rename-baseline``: the model-free baseline: every word the history's hunks replaced one-for-one (a word
  token of the removed rows replaced by one of the added rows, ``difflib`` over ``\\w+|[^\\w\\s]+`` tokens) is
  replaced throughout the region.

Scores, as the set's README defines them: exact match of the region (trailing blanks of each line ignored), chrF
(character n-grams 1-6, beta 2, whitespace removed) between the changed lines of the prediction and of the
reference, both taken as line diffs against the region before; no proposal scores 0 on both. Also the share of
cases with no proposal, the share of proposals that add a syntax error to the file (tree-sitter: errors the
edit introduced, not ones the file had), and the latency of the call (p50 / p95, and p50 on regions of 20 rows or
more), split by proposal kind (pattern / model) and pattern kind, by ``far`` (target over 40 rows below the cursor),
and by where the text the target adds can come from (``target_source``: nothing added, rows or tokens found in
the document or the history, or new tokens).
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rapidfuzz.distance import Indel

from edit_engine.eval.apply_set import nearest_rank
from edit_engine.eval.benchmarks import BenchmarkError, read_jsonl_cases, resolve_data_dir
from edit_engine.syntax import repair
from edit_engine.syntax import trees as syntax

NEXT_EDIT_FILE = Path("next-edit") / "next-edit.jsonl.gz"
FILLS = ("engine", "patterns", "rename-baseline")
LONG_REGION = 20  # rows: "p50 on long regions" counts regions at least this long


@dataclass(frozen=True)
class NextEditCase:
    """One case: the document, the cursor (a character offset), the history, the region rows ``[first, last)``
    and the region's text before and after the target edit."""

    case_id: str
    document: str
    cursor: int
    history: tuple[str, ...]
    first: int
    last: int
    region_before: str
    region_after: str
    far: bool = False
    language: str = "python"


@dataclass(frozen=True)
class Proposal:
    """A filler's answer: the region after its edit, how it was made, and the edit (document offsets)."""

    region: str
    kind: str  # pattern | model | baseline
    start: int
    end: int
    text: str
    patterns: tuple[str, ...] = ()
    inside: bool = True  # the edit lies in the case's region (``--region cursor`` proposals may lie elsewhere)


Filler = Callable[[NextEditCase], Proposal | None]
C = TypeVar("C")
A = TypeVar("A")


# ---------------------------------------------------------------------------------------------------- loading
def case_from_json(r: dict[str, Any]) -> NextEditCase:
    """A case from one line of the set (the README's fields)."""
    doc = str(r["document"])
    rows = doc.split("\n")
    line, col = int(r["cursor"]["line"]), int(r["cursor"]["col"])
    if not 0 <= line < len(rows) or not 0 <= col <= len(rows[line]):
        raise BenchmarkError(f"{r['id']}: cursor {line}:{col} outside its document")
    cursor = sum(len(x) + 1 for x in rows[:line]) + col
    first, last = int(r["region"]["start_line"]), int(r["region"]["end_line"])
    if "".join(doc.splitlines(keepends=True)[first:last]) != r["region_before"]:
        raise BenchmarkError(f"{r['id']}: the region does not match its document")
    return NextEditCase(str(r["id"]), doc, cursor, tuple(str(h) for h in r["history"]), first, last,
                        str(r["region_before"]), str(r["region_after"]), bool(r.get("far", False)))


def load_cases(data: str | Path | None = None, limit: int | None = None) -> list[NextEditCase]:
    """The first ``limit`` cases of the set (file order)."""
    path = resolve_data_dir(data) / NEXT_EDIT_FILE
    if not path.is_file():
        raise BenchmarkError(f"next-edit cases not found at {str(path)!r}")
    return read_cases(path, limit)


def read_cases(path: Path, limit: int | None = None) -> list[NextEditCase]:
    """The first ``limit`` cases of a gzipped JSON-lines file of next-edit cases (``case_from_json``)."""
    return read_jsonl_cases(path, case_from_json, limit)


# ---------------------------------------------------------------------------------------------------- metrics
def norm(s: str) -> str:
    return "\n".join(line.rstrip() for line in s.split("\n"))


def exact_match(pred: str, ref: str) -> bool:
    return norm(pred) == norm(ref)


def changed_lines(before: str, after: str) -> str:
    """The lines a diff of ``after`` against ``before`` removes ("-" marked) and adds ("+")."""
    a, b = norm(before).split("\n"), norm(after).split("\n")
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out += ["-" + x for x in a[i1:i2]] + ["+" + x for x in b[j1:j2]]
    return "\n".join(out)


def _grams(s: str, k: int) -> dict[str, int]:
    s = "".join(s.split())
    out: dict[str, int] = {}
    for i in range(len(s) - k + 1):
        out[s[i : i + k]] = out.get(s[i : i + k], 0) + 1
    return out


def chrf(hyp: str, ref: str, n: int = 6, beta: float = 2.0) -> float:
    """chrF (Popovic 2015): character n-gram precision and recall averaged over n = 1..``n``, whitespace
    removed, combined as an F-score weighting recall ``beta`` times; 1.0 when neither side has an n-gram."""
    precs, recs = [], []
    for k in range(1, n + 1):
        hg, rg = _grams(hyp, k), _grams(ref, k)
        if not hg and not rg:
            continue
        m = sum(min(v, rg.get(g, 0)) for g, v in hg.items())
        precs.append(m / sum(hg.values()) if hg else 0.0)
        recs.append(m / sum(rg.values()) if rg else 0.0)
    if not precs:
        return 1.0
    p, r = sum(precs) / len(precs), sum(recs) / len(recs)
    return 0.0 if p + r == 0 else (1 + beta**2) * p * r / (beta**2 * p + r)


def chrf_changed(pred: str, case: NextEditCase) -> float:
    return chrf(changed_lines(case.region_before, pred), changed_lines(case.region_before, case.region_after))


def breaks_parse(case: NextEditCase, p: Proposal) -> bool:
    """Whether the proposal's edit adds a syntax error to the document (tree-sitter, and Python's own parser for
    Python; errors the document had do not count)."""
    doc = syntax.Document.parse(case.document, case.language)
    return doc.tree is not None and repair.check(doc, p.start, p.end, p.text).errors > 0


# ---------------------------------------------------------------------------------------------------- fillers
def region_span(case: NextEditCase) -> tuple[int, int]:
    """Character offsets of the region's rows (each with its newline)."""
    starts = [0] + [m.end() for m in re.finditer("\n", case.document)]
    start = starts[case.first]
    end = starts[case.last] if case.last < len(starts) else len(case.document)
    return start, end


def engine_filler(engine: Any, use_model: bool = True, region: str = "target") -> Filler:
    """``Engine.next_edit`` given the case's region (``region="target"``: the set's setup, the location told),
    or given none (``"cursor"``: as an editor asks, the engine finds where; an edit outside the case's region
    is a wrong proposal)."""
    def fill(case: NextEditCase) -> Proposal | None:
        told = region == "target"
        ne = engine.next_edit(case.document, case.cursor, list(case.history), case.language,
                              region=(case.first, case.last) if told else None, use_model=use_model)
        if ne is None:
            return None
        start, end = region_span(case)
        inside = start <= ne.start <= ne.end <= end
        if told and not inside:
            raise AssertionError(f"{case.case_id}: the edit [{ne.start}, {ne.end}) leaves the region")
        new = ne.apply(case.document)
        text = new[start : end + len(new) - len(case.document)] if inside else case.region_before
        return Proposal(text, ne.kind, ne.start, ne.end, ne.text, ne.patterns, inside)

    return fill


_BASE_TOKENS = re.compile(r"\w+|[^\w\s]+")


def replaced_words(history: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Words the history's hunks replaced one-for-one (removed rows against added rows of each hunk, a later
    hunk winning): the baseline's renames."""
    out: dict[str, str] = {}
    for d in history:
        removed = "\n".join(x[1:] for x in d.split("\n") if x.startswith("-") and not x.startswith("---"))
        added = "\n".join(x[1:] for x in d.split("\n") if x.startswith("+") and not x.startswith("+++"))
        a, b = _BASE_TOKENS.findall(removed), _BASE_TOKENS.findall(added)
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            if tag == "replace" and i2 - i1 == 1 and j2 - j1 == 1 and re.match(r"\w", a[i1]) \
                    and re.match(r"\w", b[j1]):
                out[a[i1]] = b[j1]
    return out


def rename_baseline(case: NextEditCase) -> Proposal | None:
    """The model-free baseline: every replaced word replaced throughout the region (None when nothing
    changes)."""
    words = replaced_words(case.history)
    if not words:
        return None
    rx = re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\b")
    new = rx.sub(lambda m: words[m.group(1)], case.region_before)
    if new == case.region_before:
        return None
    start, end = region_span(case)
    return Proposal(new, "baseline", start, end, new)


# ---------------------------------------------------------------------------------------------------- scoring
@dataclass
class Outcome:
    case_id: str
    far: bool
    rows: int  # region rows
    proposed: bool = False
    kind: str = ""
    patterns: list[str] = field(default_factory=list)
    exact: bool = False
    chrf: float = 0.0
    breaks: bool = False
    elapsed_ms: float = 0.0
    error: str = ""
    released: bool = False  # the proposal is one of the changes the case's release made (``made_by``)
    target: str = ""  # where the target's added text can come from (``target_source``)


TARGET_SOURCES = ("deletes", "lines", "tokens", "new")
_TOKEN = re.compile(r"\w+|\S")


def target_source(c: NextEditCase) -> str:
    """Where the text the case's target adds can come from, as an engine that copies could find it:
    ``deletes`` (it adds no row that is not blank), ``lines`` (each row it adds stands, stripped, in the
    document or in a row of the history), ``tokens`` (each token it adds stands in one of them), else ``new``
    (it writes a token found in neither: new code, which only a model can write)."""
    old, new = c.region_before.splitlines(), c.region_after.splitlines()
    added = [x for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
             if tag in ("replace", "insert") for x in new[j1:j2] if x.strip()]
    if not added:
        return "deletes"
    history = [x[1:] for d in c.history for x in d.splitlines() if x[:1] in ("+", "-", " ")]
    rows = {x.strip() for x in c.document.splitlines()} | {x.strip() for x in history}
    if all(x.strip() in rows for x in added):
        return "lines"
    known = set(_TOKEN.findall(c.document)) | {t for x in history for t in _TOKEN.findall(x)}
    return "tokens" if all(t in known for x in added for t in _TOKEN.findall(x)) else "new"


def made_by(document: str, start: int, end: int, text: str, final: str) -> bool:
    """Whether the edit is a step of the way from ``document`` to ``final`` (the file as its release left it):
    it changes rows, and the rows that differ from ``final`` are fewer by exactly the rows it changes. A
    proposal that is not the next change may still be one the user makes later."""
    new = document[:start] + text + document[end:]
    step = changed_rows(document, new)
    return step > 0 and changed_rows(new, final) == changed_rows(document, final) - step


def changed_rows(a: str, b: str) -> int:
    """The fewest rows removed plus rows added that make ``a`` into ``b`` (the insert/delete distance over rows,
    exact: ``difflib``'s heuristic matching can miss the shortest script)."""
    return int(Indel.distance(a.splitlines(), b.splitlines()))


def timed(fill: Callable[[C], A | None], case: C) -> tuple[A | None, str, float]:
    """``fill(case)`` (None after a ValueError), the ValueError's message (else ""), and its wall time in ms."""
    t0 = time.perf_counter()
    try:
        got, error = fill(case), ""
    except ValueError as e:
        got, error = None, str(e)
    return got, error, (time.perf_counter() - t0) * 1e3


def run(cases: list[NextEditCase], fill: Filler, on_result: Callable[[Outcome], None] | None = None,
        finals: Mapping[str, str] | None = None) -> list[Outcome]:
    """Fill and score every case; the time is the filler's wall time. A ValueError is the case's error.
    ``finals``: case id -> the file as the case's release left it (``made_by``), where known."""
    out = []
    for c in cases:
        o = Outcome(c.case_id, c.far, c.last - c.first, target=target_source(c))
        p, o.error, o.elapsed_ms = timed(fill, c)
        if p is not None:
            o.proposed, o.kind, o.patterns = True, p.kind, list(p.patterns)
            o.exact, o.chrf, o.breaks = p.inside and exact_match(p.region, c.region_after), \
                chrf_changed(p.region, c) if p.inside else 0.0, breaks_parse(c, p)
            final = (finals or {}).get(c.case_id)
            o.released = final is not None and made_by(c.document, p.start, p.end, p.text, final)
        out.append(o)
        if on_result is not None:
            on_result(o)
    return out


def _group(outcomes: list[Outcome], n: int) -> dict[str, float]:
    """Counts and shares of a group of outcomes (shares of the whole set of ``n`` cases)."""
    proposed = [o for o in outcomes if o.proposed]
    exact = sum(o.exact for o in outcomes)
    released = sum(o.released for o in proposed)
    return {"cases": len(outcomes), "proposed": len(proposed), "exact": exact,
            "exact_match": exact / n if n else 0.0,
            "precision": exact / len(proposed) if proposed else 0.0,
            "released": released, "released_share": released / len(proposed) if proposed else 0.0,
            "chrf": sum(o.chrf for o in outcomes) / n if n else 0.0,
            "breaks": sum(o.breaks for o in proposed), "breaks_share": sum(o.breaks for o in proposed) / len(proposed)
            if proposed else 0.0}


def summary(benchmark: str, fill: str, outcomes: list[Outcome], finals: int = 0) -> dict[str, Any]:
    """The figures over all cases, by proposal kind, by pattern kinds, near / far and by what the target adds
    (``target_source``); ``finals``: the cases whose release's file is known (``released`` counts the proposals
    that are one of its changes)."""
    n = len(outcomes)
    ms = [o.elapsed_ms for o in outcomes]
    long = [o.elapsed_ms for o in outcomes if o.rows >= LONG_REGION]
    kinds = sorted({o.kind for o in outcomes if o.proposed})
    patterns = sorted({"+".join(o.patterns) for o in outcomes if o.proposed and o.patterns})
    overall = _group(outcomes, n)
    return {
        "benchmark": benchmark, "fill": fill, **overall, "finals": finals,
        "no_proposal": (n - overall["proposed"]) / n if n else 0.0,
        "errors": sum(bool(o.error) for o in outcomes),
        "p50_ms": nearest_rank(ms, 0.5), "p95_ms": nearest_rank(ms, 0.95),
        "p50_ms_long": nearest_rank(long, 0.5), "p95_ms_long": nearest_rank(long, 0.95), "long_regions": len(long),
        "by_kind": {k: _group([o for o in outcomes if o.proposed and o.kind == k], n) for k in kinds},
        "by_pattern": {k: _group([o for o in outcomes if o.proposed and "+".join(o.patterns) == k], n)
                       for k in patterns},
        "near": _group([o for o in outcomes if not o.far], len([o for o in outcomes if not o.far])),
        "far": _group([o for o in outcomes if o.far], len([o for o in outcomes if o.far])),
        "by_target": {k: _group(g, len(g)) for k in TARGET_SOURCES
                      if (g := [o for o in outcomes if o.target == k])},
    }


def report(benchmark: str, fill: str, outcomes: list[Outcome], finals: int = 0) -> dict[str, Any]:
    """``summary`` plus every case's outcome (what ``--out`` writes)."""
    return {**summary(benchmark, fill, outcomes, finals), "results": [asdict(o) for o in outcomes]}


def _row(name: str, g: dict[str, float], made: bool) -> str:
    return (f"{name:<22} {g['cases']:>5} {g['proposed']:>8} {g['exact']:>6} {100 * g['exact_match']:>6.1f}% "
            f"{100 * g['precision']:>6.1f}% {100 * g['chrf']:>6.1f} {g['breaks']:>6}"
            + (f" {100 * g['released_share']:>6.1f}%" if made else ""))


def table(s: dict[str, Any]) -> str:
    """The summary as a text table: exact match and chrF are shares of the whole set (or of the near / far
    part); precision is exact over proposed; breaks counts proposals that add a syntax error; "made" (where the
    releases' files are known) is the share of proposals that are one of the changes the release made, next or
    later."""
    made = bool(s.get("finals"))
    head = f"{'':<22} {'cases':>5} {'proposed':>8} {'exact':>6} {'EM':>7} {'prec.':>7} {'chrF':>6} {'breaks':>6}" \
        + (f" {'made':>7}" if made else "")
    rows = [f"benchmark {s['benchmark']}, fill {s['fill']}: {s['cases']} cases, no proposal "
            f"{100 * s['no_proposal']:.1f}%, proposals breaking the parse {100 * s['breaks_share']:.1f}%, "
            f"{s['errors']} refused",
            f"latency p50 {s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms; regions of {LONG_REGION}+ rows "
            f"({s['long_regions']}): p50 {s['p50_ms_long']:.1f} ms, p95 {s['p95_ms_long']:.1f} ms", head,
            _row("all", s, made)]
    rows += [_row(f"  kind {k}", g, made) for k, g in s["by_kind"].items()]
    rows += [_row(f"  pattern {k}", g, made) for k, g in s["by_pattern"].items()]
    rows += [_row("near", s["near"], made), _row("far", s["far"], made)]
    rows += [_row(f"target adds: {k}", g, made) for k, g in s.get("by_target", {}).items()]
    return "\n".join(rows)
