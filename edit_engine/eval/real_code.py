"""The real-code benchmark (``edit-engine eval --benchmark real-code``): fills at the cursor on files of PyPI
packages no checkpoint trained on, through the editor's path, beside a model-free copy baseline.

The cases come from ``benchmarks/real_code_set.py`` (``DATA/dev.jsonl`` and ``DATA/test.jsonl``, the package
files under ``DATA/files``): line, expression and block holes cut with tree-sitter (``real_code_holes``). Each
case is filled by one of ``FILLS``:

- ``engine``: ``Engine.complete(document, offset, language="python", related=[texts])``, as an editor calls it;
  the fill is what the edit puts between the text before the cursor and the text after it (an edit that
  changes either gives the empty fill, counted in ``context_changed``);
- ``copy-baseline``: ``real_code_holes.copy_fill``, the span of the same kind whose surroundings best match;
- ``empty``: the empty fill (the floor).

Scores (per kind and over all cases):

- **exact match**: line holes compare the fill's first line with both ends stripped against the hole stripped
  likewise (the line's content; lines the fill adds after it are not scored here); expression and block holes
  compare the whole fill against the hole, each with trailing whitespace removed from every line and trailing
  blank lines dropped (``scored``);
- **edit similarity**: 1 - normalized Levenshtein distance of the same two scored strings (rapidfuzz's
  ``Levenshtein.normalized_similarity``: distance over the longer length; two empty strings score 1);
- **parse rate**: the share of files that Python's own parser accepts (``ast.parse``, ``holes.parses``) with the
  fill at the cursor; every file parses with its true hole (the cutter keeps only such files). Not
  tree-sitter: it accepts a block left empty (``def f():`` with no body), the very thing an empty fill leaves;
- **source**: who wrote each fill (``Completion.source``: ``model``, ``copy`` or ``none``; ``baseline`` and
  ``empty`` for the other fills), with each source's share and exact match;
- **latency**: p50 / p95 of ``Completion.elapsed_ms`` (the baseline: its wall time), and mean forward passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from edit_engine.eval.apply_set import nearest_rank
from edit_engine.eval.benchmarks import BenchmarkError, read_jsonl_cases
from edit_engine.eval.holes import parses
from edit_engine.eval.real_code_holes import KINDS, Source, copy_fill

FILLS = ("engine", "copy-baseline", "empty")
SPLITS = ("dev", "test")


@dataclass(frozen=True)
class Case:
    """One hole: ``document`` without it, the cursor ``offset``, the true ``hole``, and the related files."""

    case_id: str
    package: str
    path: str
    kind: str  # line | expression | block
    document: str
    offset: int
    hole: str
    related_paths: tuple[str, ...] = ()
    related: tuple[str, ...] = ()  # the related files' texts (empty with --no-related)


def load_cases(data: str | Path | None, split: str, limit: int | None = None,
               related: bool = True) -> list[Case]:
    """The first ``limit`` cases of ``DATA/SPLIT.jsonl`` with their related files read (unless ``related``)."""
    if data is None:
        raise BenchmarkError("real-code needs --data DIR (built by: python benchmarks/real_code_set.py --out DIR)")
    if split not in SPLITS:
        raise BenchmarkError(f"--split must be one of {', '.join(SPLITS)}, not {split!r}")
    d = Path(data)
    path = d / f"{split}.jsonl"
    if not path.is_file():
        raise BenchmarkError(f"{str(path)!r} not found (build it: python benchmarks/real_code_set.py --out {d})")
    texts: dict[Path, str] = {}

    def read(p: Path) -> str:
        if p not in texts:
            if not p.is_file():
                raise BenchmarkError(f"related file {str(p)!r} is missing")
            texts[p] = p.read_text(encoding="utf-8")
        return texts[p]

    def case(r: dict[str, Any]) -> Case:
        if r["kind"] not in KINDS or not 0 <= r["offset"] <= len(r["document"]):
            raise BenchmarkError(f"{r['id']}: unknown kind or cursor outside the document")
        paths = tuple(str(p) for p in r.get("related", []))
        rel = tuple(read(d / "files" / r["package"] / p) for p in paths) if related else ()
        return Case(str(r["id"]), str(r["package"]), str(r["path"]), str(r["kind"]), str(r["document"]),
                    int(r["offset"]), str(r["hole"]), paths, rel)

    return read_jsonl_cases(path, case, limit)


# ---------------------------------------------------------------------------------------------------- fills
@dataclass(frozen=True)
class Fill:
    text: str  # what goes between document[:offset] and document[offset:]
    source: str  # model | copy | none (the engine), baseline, empty
    nfe: int = 0
    elapsed_ms: float = 0.0
    reason: str = ""
    context_changed: bool = False  # the engine's edit changed text around the cursor: scored as the empty fill


Filler = Callable[[Case], Fill]


def engine_filler(engine: Any, **overrides: Any) -> Filler:
    """``Engine.complete`` on the case's document and cursor, with its related files (and sampler
    ``overrides``, e.g. ``threshold``: the decoding rules tuned on the dev split)."""
    def fill(case: Case) -> Fill:
        c = engine.complete(case.document, case.offset, language="python", related=list(case.related),
                            **overrides)
        doc, o = case.document, case.offset
        new = doc[: c.start] + c.text + doc[c.end :]
        kept = len(new) >= len(doc) and new.startswith(doc[:o]) and new.endswith(doc[o:])
        text = new[o : len(new) - (len(doc) - o)] if kept else ""
        return Fill(text, c.source, c.nfe, c.elapsed_ms, c.reason, not kept)

    return fill


@lru_cache(maxsize=64)
def _parsed(text: str) -> Source:
    return Source.parse(text)


def copy_baseline(case: Case) -> Fill:
    """The model-free baseline (``real_code_holes.copy_fill``); with no candidate, the empty fill."""
    t0 = time.perf_counter()
    c = copy_fill(case.kind, case.document, case.offset, case.related, parse=_parsed)
    return Fill(c.text if c is not None else "", "baseline", elapsed_ms=(time.perf_counter() - t0) * 1e3)


def empty_filler(case: Case) -> Fill:
    return Fill("", "empty")


# ---------------------------------------------------------------------------------------------------- scoring
def scored(kind: str, text: str) -> str:
    """The part of a fill (or hole) that exact match and edit similarity compare: a line hole's first line with
    both ends stripped; otherwise the text with trailing whitespace off every line and no trailing blank line."""
    if kind == "line":
        return text.split("\n", 1)[0].strip()
    return "\n".join(ln.rstrip() for ln in text.split("\n")).rstrip("\n")


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein distance / the longer length (1.0 for two empty strings)."""
    from rapidfuzz.distance import Levenshtein

    return float(Levenshtein.normalized_similarity(a, b))


@dataclass
class Outcome:
    case_id: str
    package: str
    kind: str
    source: str
    fill: str
    hole: str
    exact: bool
    edit_sim: float
    parse_ok: bool
    nfe: int
    elapsed_ms: float
    context_changed: bool = False
    reason: str = ""
    error: str = ""


def score(case: Case, f: Fill, error: str = "") -> Outcome:
    a, b = scored(case.kind, f.text), scored(case.kind, case.hole)
    doc = case.document[: case.offset] + f.text + case.document[case.offset :]
    return Outcome(case.case_id, case.package, case.kind, f.source, f.text, case.hole, a == b,
                   edit_similarity(a, b), parses(doc), f.nfe, f.elapsed_ms, f.context_changed, f.reason, error)


def run(cases: list[Case], fill: Filler, on_result: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Fill and score every case; a ValueError from the filler is the case's error (scored as the empty fill)."""
    out = []
    for c in cases:
        try:
            f, err = fill(c), ""
        except ValueError as e:
            f, err = Fill("", "none"), str(e)
        o = score(c, f, err)
        out.append(o)
        if on_result is not None:
            on_result(o)
    return out


def group(outcomes: list[Outcome]) -> dict[str, Any]:
    """The figures of a group of outcomes (shares within the group)."""
    n = len(outcomes)
    ms = [o.elapsed_ms for o in outcomes]
    sources: dict[str, dict[str, float]] = {}
    for s in sorted({o.source for o in outcomes}):
        mine = [o for o in outcomes if o.source == s]
        sources[s] = {"cases": len(mine), "share": len(mine) / n, "exact_match": sum(o.exact for o in mine) / len(mine)}
    return {"cases": n, "exact": sum(o.exact for o in outcomes),
            "exact_match": sum(o.exact for o in outcomes) / n if n else 0.0,
            "edit_sim": sum(o.edit_sim for o in outcomes) / n if n else 0.0,
            "parse_ok": sum(o.parse_ok for o in outcomes) / n if n else 0.0,
            "empty_share": sum(not o.fill.strip() for o in outcomes) / n if n else 0.0,
            "context_changed": sum(o.context_changed for o in outcomes),
            "p50_ms": nearest_rank(ms, 0.5), "p95_ms": nearest_rank(ms, 0.95),
            "nfe_mean": sum(o.nfe for o in outcomes) / n if n else 0.0, "sources": sources}


def summary(split: str, fill: str, related: bool, outcomes: list[Outcome]) -> dict[str, Any]:
    return {"benchmark": "real-code", "split": split, "fill": fill, "related": related, **group(outcomes),
            "errors": sum(bool(o.error) for o in outcomes),
            "by_kind": {k: group([o for o in outcomes if o.kind == k]) for k in KINDS
                        if any(o.kind == k for o in outcomes)},
            "by_package": {p: group([o for o in outcomes if o.package == p])
                           for p in sorted({o.package for o in outcomes})}}


def _row(name: str, g: dict[str, Any]) -> str:
    src = "  ".join(f"{s} {100 * v['share']:.0f}% (EM {100 * v['exact_match']:.0f}%)" for s, v in g["sources"].items())
    return (f"{name:<18} {g['cases']:>5} {100 * g['exact_match']:>6.1f}% {g['edit_sim']:>6.3f} "
            f"{100 * g['parse_ok']:>6.1f}% {g['p50_ms']:>8.1f} {g['p95_ms']:>8.1f} {g['nfe_mean']:>6.1f}  {src}")


def table(s: dict[str, Any]) -> str:
    """The summary as aligned text: one row over all cases, one per kind, one per package."""
    head = (f"{'':<18} {'cases':>5} {'EM':>7} {'ES':>6} {'parse':>7} {'p50 ms':>8} {'p95 ms':>8} {'nfe':>6}  "
            "source share (EM within)")
    rows = [f"benchmark real-code, split {s['split']}, fill {s['fill']}, related files "
            f"{'on' if s['related'] else 'off'}: {s['cases']} cases, {s['errors']} refused, "
            f"{s['context_changed']} edits changed the context", head, _row("all", s)]
    rows += [_row(f"  {k}", g) for k, g in s["by_kind"].items()]
    rows += [_row(f"  {p}", g) for p, g in s["by_package"].items()]
    return "\n".join(rows)
