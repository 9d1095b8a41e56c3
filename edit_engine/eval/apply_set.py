"""The apply benchmark (``edit-engine eval --benchmark apply``): merge a marker snippet into a file and compare
with the file it should give. Built deterministically, never tuned on:

- ``next_edit_cases``: from the shared next-edit cases (``../shared/benchmarks/next-edit/``, evaluation data
  only). Each case's file before its edit is the document; after it, the document with the editable region
  replaced by the region after the edit.
- ``synthetic_cases``: from this package's own sources, a seeded edit per file (a changed, inserted or deleted
  line in a function or method, a new function, a renamed function), so tests need no shared data.

Either way the update is what a chat model writes for the edit (``snippet``): the changed definition(s) whole
when they are small (a method under its class header), otherwise the changed lines with 2-3 non-blank lines of
context; everything else elided by ``# ... existing code ...`` lines indented like the code they stand for.
A case scores when the merged file equals the file after, exactly.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edit_engine.edits.apply import ApplyResult, Definition, definitions
from edit_engine.eval.benchmarks import BenchmarkError, resolve_data_dir
from edit_engine.syntax import repair
from edit_engine.syntax import trees as syntax

MARKER = "# ... existing code ..."
DEFINITION_LINES = 40  # a changed definition up to this long is shown whole
NEXT_EDIT_FILE = Path("next-edit") / "next-edit.jsonl.gz"


@dataclass(frozen=True)
class ApplyCase:
    case_id: str
    language: str
    original: str
    update: str
    expected: str
    style: str  # how the snippet shows the edit: definition | lines | mixed
    edit: str = ""  # synthetic cases: the kind of edit


# ---------------------------------------------------------------------------------------------------- snippets
def _lines(text: str) -> list[str]:
    rows = text.split("\n")
    return rows[:-1] if rows and rows[-1] == "" else rows


def lost_lines(merged: str, target: str) -> list[str]:
    """The non-blank lines ``target`` has that ``merged`` lacks (counted with repeats, blanks around them
    ignored): code a wrong merge destroyed; a merge that only keeps lines the edit deleted (or doubles some)
    loses none."""
    have = Counter(x.strip() for x in merged.splitlines() if x.strip())
    want = Counter(x.strip() for x in target.splitlines() if x.strip())
    return sorted((want - have).elements())


def context_span(rows: list[str], j1: int, j2: int, ctx: int) -> tuple[int, int]:
    """[s, e) around rows [j1, j2) holding ``ctx`` non-blank rows on each side (fewer at the file's ends)."""
    s, seen = j1, 0
    while s > 0 and seen < ctx:
        s -= 1
        seen += bool(rows[s].strip())
    e, seen = j2, 0
    while e < len(rows) and seen < ctx:
        seen += bool(rows[e].strip())
        e += 1
    return s, e


def _shown(rows: list[str], defs: list[Definition], old: dict[tuple[str, ...], Definition], hunk: tuple[int, ...],
           ctx: int) -> tuple[list[tuple[int, int]], str]:
    """The rows of ``after`` that show one changed hunk (rows [i1, i2) before, [j1, j2) after; j1 == j2: lines
    deleted before row j1), and the style: the outermost definition around it that is small enough and held
    the hunk before too (with the headers of the definitions around that one), else the hunk with its
    context."""
    i1, i2, j1, j2 = hunk
    last = max(j2, j1 + 1) - 1
    around = [i for i, d in enumerate(defs) if d.start < j1 and last < d.end - (j1 == j2)]
    for i in around:  # outer first
        d, was = defs[i], old.get(defs[i].qual)
        if (d.end - d.start <= DEFINITION_LINES and was is not None and d.inner < j1
                and was.inner < i1 and i2 <= was.end - (i1 == i2)):
            out = [(d.start, d.end)]
            p = d.parent
            while p >= 0:
                out.append((defs[p].start, max(defs[p].body, defs[p].inner + 1)))
                p = defs[p].parent
            return out, "definition"
    return [context_span(rows, j1, j2, ctx)], "lines"


def snippet(before: str, after: str, language: str = "python", context: int = 3) -> tuple[str, str] | None:
    """The marker snippet a chat model writes for the edit ``before`` -> ``after``, and its style; None when
    the two are the same."""
    a_rows, b_rows = _lines(after), _lines(before)
    hunks = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, b_rows, a_rows,
             autojunk=False).get_opcodes() if tag != "equal"]
    if not hunks:
        return None
    defs = definitions(syntax.Document.parse(after, language))
    old = {d.qual: d for d in definitions(syntax.Document.parse(before, language))}
    ranges: list[tuple[int, int]] = []
    styles = set()
    for hunk in hunks:
        got, style = _shown(a_rows, defs, old, hunk, context)
        ranges += got
        styles.add(style)
    merged: list[list[int]] = []
    for s, e in sorted(ranges):
        gap = a_rows[merged[-1][1] : s] if merged else []
        if merged and (s <= merged[-1][1] or not any(x.strip() for x in gap) or len(gap) < 3):
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    out: list[str] = []
    pos = 0
    for s, e in merged:
        _elide(a_rows, pos, s, out)
        out += a_rows[s:e]
        pos = e
    _elide(a_rows, pos, len(a_rows), out)
    return "\n".join(out) + "\n", styles.pop() if len(styles) == 1 else "mixed"


def _elide(rows: list[str], s: int, e: int, out: list[str]) -> None:
    """A marker for rows [s, e), indented like the first of them that holds code; blank rows are kept."""
    code = [x for x in rows[s:e] if x.strip()]
    if code:
        out.append(" " * (len(code[0]) - len(code[0].lstrip())) + MARKER)
    elif e > s and out:
        out += rows[s:e]


def _context_for(case_id: str) -> int:
    """2 or 3 lines of context, a fixed choice per case."""
    return 2 + hashlib.sha1(case_id.encode()).digest()[0] % 2


def make_case(case_id: str, before: str, after: str, language: str = "python", edit: str = "") -> ApplyCase | None:
    got = snippet(before, after, language, _context_for(case_id))
    if got is None:
        return None
    return ApplyCase(case_id, language, before, got[0], after, got[1], edit)


# ---------------------------------------------------------------------------------------------------- the sets
def next_edit_cases(data: str | Path | None = None, limit: int | None = None) -> list[ApplyCase]:
    """Apply cases from the shared next-edit set (file order), the first ``limit``."""
    path = resolve_data_dir(data) / NEXT_EDIT_FILE
    if not path.is_file():
        raise BenchmarkError(f"next-edit cases not found at {str(path)!r}")
    out: list[ApplyCase] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            parts = str(r["document"]).splitlines(keepends=True)
            s, e = int(r["region"]["start_line"]), int(r["region"]["end_line"])
            if "".join(parts[s:e]) != r["region_before"]:
                raise BenchmarkError(f"{r['id']}: the region does not match its document")
            after = "".join(parts[:s]) + str(r["region_after"]) + "".join(parts[e:])
            case = make_case(str(r["id"]), str(r["document"]), after, "python")
            if case is not None:
                out.append(case)
            if limit is not None and len(out) >= limit:
                break
    return out


EDITS = ("change-line", "insert-line", "delete-line", "new-function", "rename", "change-method")


def synthetic_cases(root: str | Path | None = None, limit: int | None = None) -> list[ApplyCase]:
    """One seeded edit per Python file under ``root`` (default: this package), the edit kinds in turn; an edit
    whose file no longer parses is skipped."""
    base = Path(root) if root is not None else Path(__file__).resolve().parent.parent
    out: list[ApplyCase] = []
    for path in sorted(base.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") < 40:
            continue
        name = path.relative_to(base.parent).as_posix()
        kind = EDITS[len(out) % len(EDITS)]
        after = _edit(text, kind, random.Random(f"apply:{name}"))
        if after is not None and repair.python_error(after) is not None and repair.python_error(text) is None:
            after = None  # an edit that breaks the code (a line of a docstring taken for a statement) is no case
        case = make_case(f"{name}#{kind}", text, after, "python", kind) if after is not None else None
        if case is not None:
            out.append(case)
        if limit is not None and len(out) >= limit:
            break
    return out


def _simple_rows(rows: list[str], d: Definition) -> list[int]:
    """Rows of a definition's body that hold a whole one-line statement at the body's indentation."""
    first = next((r for r in range(max(d.body, d.inner + 1), d.end) if rows[r].strip()), None)
    if first is None:
        return []
    ind = len(rows[first]) - len(rows[first].lstrip())
    out = []
    for r in range(first, d.end):
        x = rows[r]
        nxt = next((rows[t] for t in range(r + 1, len(rows)) if rows[t].strip()), "")
        whole = sum(x.count(c) for c in "([{") == sum(x.count(c) for c in ")]}")
        if (x.strip() and len(x) - len(x.lstrip()) == ind and len(nxt) - len(nxt.lstrip()) <= ind and whole
                and not x.rstrip().endswith((":", "(", "[", "{", ",", "\\"))
                and not x.lstrip().startswith(("\"", "'", "@", "#", ")", "]", "}"))
                and not rows[r - 1].rstrip().endswith(("\\", ",", "("))):
            out.append(r)
    return out


def _edit(text: str, kind: str, rng: random.Random) -> str | None:
    """``text`` with one edit of ``kind`` (None when the file offers no place for it)."""
    rows = text.split("\n")
    defs = definitions(syntax.Document.parse(text, "python"))
    funcs = [d for d in defs if rows[d.inner].lstrip().startswith(("def ", "async def "))]
    if kind == "new-function" or kind == "rename":
        top = [d for d in funcs if d.parent < 0]
        if not top:
            return None
        d = rng.choice(top)
        if kind == "rename":
            rows[d.inner] = rows[d.inner].replace(f"def {d.name}(", f"def {d.name}_renamed(", 1)
        else:
            rows[d.end : d.end] = ["", "", "def added_helper(value):", "    return value"]
        return "\n".join(rows)
    pool = [d for d in funcs if (d.parent >= 0) == (kind == "change-method") or kind != "change-method"]
    spots = [(d, r) for d in pool for r in _simple_rows(rows, d)]
    if kind == "delete-line":
        spots = [(d, r) for d, r in spots if len(_simple_rows(rows, d)) > 1]
    if not spots:
        return None
    d, r = rng.choice(spots)
    ind = rows[r][: len(rows[r]) - len(rows[r].lstrip())]
    if kind in ("change-line", "change-method"):
        rows[r] = rows[r] + "  # edited" if "#" not in rows[r] else rows[r].split("#")[0].rstrip()
    elif kind == "insert-line":
        rows.insert(r, f"{ind}_checked = True")
    else:
        del rows[r]
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------------- scoring
@dataclass
class ApplyOutcome:
    case_id: str
    exact: bool
    elapsed_ms: float
    lines: int  # the original's line count
    style: str
    kinds: list[str] = field(default_factory=list)  # placement kind of each chunk
    error: str = ""


def run(cases: list[ApplyCase], apply: Callable[[str, str, str], ApplyResult],
        on_result: Callable[[ApplyOutcome], None] | None = None) -> list[ApplyOutcome]:
    """Merge every case with ``apply(original, update, language)``; the time is the call's wall time."""
    out = []
    for c in cases:
        t0 = time.perf_counter()
        try:
            r = apply(c.original, c.update, c.language)
            o = ApplyOutcome(c.case_id, r.text == c.expected, 0.0, c.original.count("\n") + 1, c.style,
                             [p.kind for p in r.placements])
        except ValueError as e:
            o = ApplyOutcome(c.case_id, False, 0.0, c.original.count("\n") + 1, c.style, error=str(e))
        o.elapsed_ms = (time.perf_counter() - t0) * 1e3
        out.append(o)
        if on_result is not None:
            on_result(o)
    return out


def nearest_rank(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for none)."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def summary(benchmark: str, outcomes: list[ApplyOutcome]) -> dict[str, Any]:
    """Exact match, latency (all cases; files of 200-400 lines) and both by placement kind and snippet style."""
    n = len(outcomes)
    ms = [o.elapsed_ms for o in outcomes]
    mid = [o.elapsed_ms for o in outcomes if 200 <= o.lines <= 400]
    kinds: dict[str, dict[str, float]] = {}
    for kind in sorted({k for o in outcomes for k in o.kinds}):
        with_kind = [o for o in outcomes if kind in o.kinds]
        kinds[kind] = {"chunks": sum(o.kinds.count(kind) for o in outcomes), "cases": len(with_kind),
                       "exact_match": sum(o.exact for o in with_kind) / len(with_kind)}
    styles = {s: {"cases": len(g), "exact_match": sum(o.exact for o in g) / len(g)}
              for s in sorted({o.style for o in outcomes}) for g in [[o for o in outcomes if o.style == s]]}
    return {"benchmark": benchmark, "cases": n, "exact": sum(o.exact for o in outcomes),
            "exact_match": sum(o.exact for o in outcomes) / n if n else 0.0,
            "errors": sum(bool(o.error) for o in outcomes), "p50_ms": nearest_rank(ms, 0.5), "p95_ms": nearest_rank(ms, 0.95),
            "p50_ms_200_400_lines": nearest_rank(mid, 0.5), "cases_200_400_lines": len(mid),
            "median_lines": nearest_rank([float(o.lines) for o in outcomes], 0.5), "by_kind": kinds, "by_style": styles}


def table(s: dict[str, Any]) -> str:
    rows = [f"benchmark        {s['benchmark']} ({s['cases']} cases, median {s['median_lines']:.0f} lines)",
            f"exact match      {100 * s['exact_match']:.1f}% ({s['exact']}/{s['cases']}), {s['errors']} refused",
            f"latency          p50 {s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms; files of 200-400 lines "
            f"({s['cases_200_400_lines']}): p50 {s['p50_ms_200_400_lines']:.1f} ms"]
    rows += [f"  placed by {k:<11} {v['chunks']:>4} chunks in {v['cases']:>4} cases, exact match "
             f"{100 * v['exact_match']:.1f}%" for k, v in s["by_kind"].items()]
    rows += [f"  snippet {k:<13} {v['cases']:>4} cases, exact match {100 * v['exact_match']:.1f}%"
             for k, v in s["by_style"].items()]
    return "\n".join(rows)


def report(benchmark: str, outcomes: list[ApplyOutcome]) -> dict[str, Any]:
    """``summary`` plus every case's outcome (what ``--out`` writes)."""
    return {**summary(benchmark, outcomes), "results": [asdict(o) for o in outcomes]}
