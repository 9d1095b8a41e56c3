"""Next edit in the other open documents (``edit-engine eval --benchmark next-edit-elsewhere --data DIR``): cases
cut from the releases a release set downloaded (``benchmarks/release_edits.py --out DIR`` keeps them in
``DIR/downloads``, listed in ``DIR/manifest.json``).

A person finishes the changes of one file and the editor asks for the next edit: does it find the changes the
release made to the *other* files, and does it leave alone the files the release did not touch? For each pair of
consecutive releases of a package and each changed ``.py`` file A (both versions usable as in
``release_edits``, hunks as its difflib opcodes, at least one of at most ``MAX_HUNK_ROWS`` rows), one case:

- *document*: A after the release; *history*: its last hunks (at most ``MAX_HISTORY``, each a unified diff against
  the file as the hunks before it left it, from the last one over ``MAX_HUNK_ROWS`` on); *cursor*: the end of
  the last hunk's last added row;
- *other open documents*: the release's other changed files as they were before it (at most ``CHANGED_OPEN``,
  those in A's folder first, then by path), and ``STILL_OPEN`` files of the package the release left alone (a
  seeded choice): an editor holds files that need no change too.

A proposal in A itself or in an unchanged file is wrong. One in a changed file B is *exact* when every row run it
changes is a whole hunk of B's change, changed alike (difflib opcodes of B before -> B with the proposal, each
one of B before -> B after), and *part* when each run it changes lies inside one of B's hunks and writes only
rows that hunk added. At most ``PER_PAIR`` cases per release pair (a seeded choice), in id order.
"""

from __future__ import annotations

import difflib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from edit_engine.eval.apply_set import nearest_rank
from edit_engine.eval.benchmarks import BenchmarkError
from edit_engine.eval.next_edit_set import timed
from edit_engine.eval.release_edits import (
    MANIFEST_FILE,
    MAX_HISTORY,
    MAX_HUNK_ROWS,
    SEED,
    usable_text,
    wheel_sources,
)

CHANGED_OPEN = 5
STILL_OPEN = 3
PER_PAIR = 8


@dataclass(frozen=True)
class ElsewhereCase:
    case_id: str
    path: str
    document: str
    cursor: int
    history: tuple[str, ...]
    others: dict[str, str]  # path -> text before the release, in the order an editor would rank them
    after: dict[str, str]  # the changed ones' texts after the release


@dataclass
class Outcome:
    case_id: str
    proposed: bool = False
    where: str = ""  # here | changed | unchanged
    patterns: list[str] = field(default_factory=list)
    exact: bool = False
    part: bool = False
    elapsed_ms: float = 0.0
    error: str = ""


# An engine's answer: (the document it edits, None for the case's own; start; end; new text; pattern kinds)
Answer = tuple[str | None, int, int, str, tuple[str, ...]]
Filler = Callable[[ElsewhereCase], Answer | None]


def _ops(a: list[str], b: list[str]) -> list[tuple[int, int, int, int]]:
    return [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False)
            .get_opcodes() if tag != "equal"]


def file_case(case_id: str, path: str, before: str, after: str) -> tuple[str, int, tuple[str, ...]] | None:
    """(document, cursor, history) of a finished change of one file, or None (no hunk small enough)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    ops = _ops(a, b)
    if not ops or ops[-1][1] - ops[-1][0] + ops[-1][3] - ops[-1][2] > MAX_HUNK_ROWS:
        return None

    def state(k: int) -> list[str]:
        return a if k == 0 else b[: ops[k - 1][3]] + a[ops[k - 1][1] :]

    k = len(ops)
    w = k - 1
    while w > 0 and k - w < MAX_HISTORY and ops[w - 1][1] - ops[w - 1][0] + ops[w - 1][3] - ops[w - 1][2] <= \
            MAX_HUNK_ROWS:
        w -= 1
    history = tuple("".join(difflib.unified_diff(state(i), state(i + 1), f"a/{path}", f"b/{path}", n=3))
                    for i in range(w, k))
    last = ops[-1]
    added = b[last[2] : last[3]]
    row = last[2] + max(len(added) - 1, 0)
    cursor = sum(len(x) for x in b[:row]) + (len(added[-1].rstrip("\n")) if added else 0)
    return after, cursor, history


def pair_cases(package: str, old: tuple[str, dict[str, str]], new: tuple[str, dict[str, str]]) -> list[ElsewhereCase]:
    """The cases of one release pair (version, {path: text})."""
    (va, files_a), (vb, files_b) = old, new
    usable = {p: (ta, tb) for p in sorted(set(files_a) & set(files_b))
              if (ta := usable_text(files_a[p])) is not None and (tb := usable_text(files_b[p])) is not None}
    changed = [p for p, (ta, tb) in usable.items() if ta != tb]
    still = [p for p, (ta, tb) in usable.items() if ta == tb]
    out = []
    for path in changed:
        got = file_case(f"{package}@{va}..{vb}:{path}", path, *usable[path])
        if got is None:
            continue
        folder = PurePosixPath(path).parent
        near = sorted((p for p in changed if p != path), key=lambda p: (PurePosixPath(p).parent != folder, p))
        rng = random.Random(f"{SEED}:{package}:{va}:{vb}:{path}")
        opened = near[:CHANGED_OPEN] + rng.sample(still, min(STILL_OPEN, len(still)))
        rng.shuffle(opened)  # the editor's order (most recently used) says nothing of which need a change
        document, cursor, history = got
        out.append(ElsewhereCase(f"{package}@{va}..{vb}:{path}", path, document, cursor, history,
                                 {p: usable[p][0] for p in opened},
                                 {p: usable[p][1] for p in opened if p in near}))
    random.Random(f"{SEED}:{package}:{va}:{vb}").shuffle(out)
    return sorted(out[:PER_PAIR], key=lambda c: c.case_id)


def load_cases(data: str | Path | None = None, limit: int | None = None) -> list[ElsewhereCase]:
    """The cases of the releases a release set downloaded (default ``runs/release_edits``)."""
    root = Path(data if data is not None else "runs/release_edits")
    try:
        manifest = json.loads((root / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BenchmarkError(f"no release set at {str(root)!r} ({e}); build one with "
                             "python benchmarks/release_edits.py --out DIR") from None
    by_package: dict[str, list[tuple[str, Path]]] = {}
    for d in manifest["downloads"]:
        by_package.setdefault(d["package"], []).append((d["version"], root / "downloads" / d["file"]))
    out: list[ElsewhereCase] = []
    for package, releases in by_package.items():
        trees = []
        for version, wheel in releases:
            if not wheel.is_file():
                raise BenchmarkError(f"{wheel} is missing; build the set again with benchmarks/release_edits.py")
            trees.append((version, wheel_sources(wheel)))
        for old, new in zip(trees, trees[1:], strict=False):
            out += pair_cases(package, old, new)
    out.sort(key=lambda c: c.case_id)
    return out[:limit] if limit else out


def score(case: ElsewhereCase, answer: Answer, outcome: Outcome) -> None:
    """Where the proposal went and whether the release made it (``outcome``'s fields)."""
    name, start, end, text, kinds = answer
    outcome.proposed, outcome.patterns = True, list(kinds)
    if name is None or name not in case.after:
        outcome.where = "here" if name is None else "unchanged"
        return
    outcome.where = "changed"
    before = case.others[name]
    a = before.splitlines(keepends=True)
    mine = (before[:start] + text + before[end:]).splitlines(keepends=True)
    b = case.after[name].splitlines(keepends=True)
    truth = _ops(a, b)
    runs = _ops(a, mine)
    outcome.exact = bool(runs) and all(any(t[:2] == r[:2] and b[t[2] : t[3]] == mine[r[2] : r[3]] for t in truth)
                                       for r in runs)
    outcome.part = bool(runs) and all(any(t[0] <= r[0] and r[1] <= t[1] and (r[1] > r[0] or t[0] < r[0] < t[1]
                                                                          or t[0] == r[0])
                                          and all(x in b[t[2] : t[3]] for x in mine[r[2] : r[3]]) for t in truth)
                                      for r in runs)


def run(cases: list[ElsewhereCase], fill: Filler,
        on_result: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Fill and score every case (``next_edit_set.timed``: a ValueError is the case's error)."""
    out = []
    for c in cases:
        o = Outcome(c.case_id)
        got, o.error, o.elapsed_ms = timed(fill, c)
        if got is not None:
            score(c, got, o)
        out.append(o)
        if on_result is not None:
            on_result(o)
    return out


def engine_filler(engine: Any, use_model: bool = False) -> Filler:
    """The engine's proposal with the other files open (no region: the whole documents, as in an editor)."""

    def fill(c: ElsewhereCase) -> Answer | None:
        ne = engine.next_edit(c.document, c.cursor, list(c.history), "python", use_model=use_model,
                              others=c.others)
        return None if ne is None else (ne.document, ne.start, ne.end, ne.text, tuple(ne.patterns))

    return fill


def _group(outcomes: list[Outcome]) -> dict[str, Any]:
    proposed = [o for o in outcomes if o.proposed]
    exact = sum(o.exact for o in proposed)
    return {"proposed": len(proposed), "exact": exact, "part": sum(o.part for o in proposed),
            "precision": exact / len(proposed) if proposed else 0.0}


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    ms = [o.elapsed_ms for o in outcomes]
    away = [o for o in outcomes if o.where in ("changed", "unchanged")]  # proposals in the other files
    patterns = sorted({"+".join(o.patterns) for o in away})
    return {"benchmark": "next-edit-elsewhere", "cases": len(outcomes), **_group(outcomes),
            "here": sum(o.where == "here" for o in outcomes),
            "unchanged": sum(o.where == "unchanged" for o in outcomes),
            "changed": sum(o.where == "changed" for o in outcomes),
            "errors": sum(bool(o.error) for o in outcomes),
            "p50_ms": nearest_rank(ms, 0.5), "p95_ms": nearest_rank(ms, 0.95),
            "elsewhere": _group(away),
            "by_pattern": {k: _group([o for o in away if "+".join(o.patterns) == k]) for k in patterns}}


def report(outcomes: list[Outcome]) -> dict[str, Any]:
    return {**summary(outcomes), "results": [asdict(o) for o in outcomes]}


def _rows(s: dict[str, Any]) -> Iterator[str]:
    yield (f"benchmark next-edit-elsewhere: {s['cases']} cases, {s['proposed']} proposals: {s['here']} in the "
           f"finished file, {s['unchanged']} in files the release left alone, {s['changed']} in files it changed; "
           f"{s['errors']} refused")
    yield f"latency p50 {s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms"
    yield f"{'':<24} {'proposed':>8} {'exact':>6} {'part':>6} {'prec.':>7}"
    for name, g in [("all", s), ("in the other files", s["elsewhere"]),
                    *((f"  pattern {k}", g) for k, g in s["by_pattern"].items())]:
        yield f"{name:<24} {g['proposed']:>8} {g['exact']:>6} {g['part']:>6} {100 * g['precision']:>6.1f}%"


def table(s: dict[str, Any]) -> str:
    """The summary as text: precision is exact over proposed; the pattern rows count the proposals in the other
    files."""
    return "\n".join(_rows(s))
