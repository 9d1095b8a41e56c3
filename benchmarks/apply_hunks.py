"""Apply on real hunks: each next-edit case's target hunk turned into a marker snippet, merged into its file.

For every case of a next-edit set (``--set history``: cut from a git repository's history, by default this one;
``--set releases``: release histories written by ``benchmarks/release_edits.py``, the held-out ones by default),
the target hunk's new lines with ``--context`` lines of the file before and after it (1, 2 and 5 by default;
``--count nonblank``: as many non-blank lines, with the blank ones between them; ``both``, the default, gives a
row each), and a ``# ... existing code ...`` marker on each side that does not reach the file's edge, are the
update snippet; the file after the hunk is the target. ``Engine.apply``'s merge (``edits.apply.merge``: no
model) answers with the file, or refuses (ValueError). Counted per context: exact, refused, wrong merges (a
file that differs: the failure that matters, since a refusal is seen and a wrong merge may not be) and, of
those, the ones that lose code (``lost``: a non-blank line the target has is missing; the others only keep
lines the edit deleted, or double some). A second table splits the cases by what the snippet's context tells of
the hunk's place (``reading``: at one place, at several, a side of blank lines only, or a hunk whose file does not
parse on its own). Prints the tables; ``--json PATH`` writes the counts and the ids of the wrong merges.

Development sets: this repository's history, and the release histories of the edit model's training packages
(``release_edits.py --set train``, 1,612 hunks). The held-out release set is for reporting.

    python benchmarks/apply_hunks.py --set history --context 1 2 5 --json runs/apply_hunks.json
    python benchmarks/release_edits.py --set train --out runs/edit_train_releases
    python benchmarks/apply_hunks.py --set releases --data runs/edit_train_releases
    python benchmarks/apply_hunks.py --set releases --data runs/release_edits
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import time
from pathlib import Path
from typing import Any

from edit_engine.edits.apply import merge
from edit_engine.eval.apply_set import context_span, lost_lines
from edit_engine.eval.next_edit_history import history_cases
from edit_engine.eval.next_edit_set import NextEditCase
from edit_engine.eval.release_edits import load_cases as release_cases

MARKER = "# ... existing code ...\n"


def snippet(case: NextEditCase, context: int, nonblank: bool = False) -> tuple[str, str] | None:
    """The update snippet for the case's target hunk with ``context`` lines around it (``nonblank``: as many
    non-blank lines, with the blank lines between them), and the file after it; None when the target changes
    nothing."""
    got = _cut(case, context, nonblank)
    return None if got is None else (got[0], got[1])


def _cut(case: NextEditCase, context: int, nonblank: bool) -> tuple[str, str, str] | None:
    """``snippet``'s update and target, and what the snippet's context says of the hunk's place
    (``reading``)."""
    rows = case.document.splitlines(keepends=True)
    after = "".join(rows[: case.first]) + case.region_after + "".join(rows[case.last :])
    new = after.splitlines(keepends=True)
    ops = [o for o in difflib.SequenceMatcher(None, rows, new, autojunk=False).get_opcodes() if o[0] != "equal"]
    if not ops:
        return None
    i1, i2, j1, j2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    s, e = max(0, i1 - context), min(len(rows), i2 + context)
    if nonblank:
        s, e = context_span(rows, i1, i2, context)
    text = (MARKER if s > 0 else "") + "".join(rows[s:i1] + new[j1:j2] + rows[i2:e]) + (MARKER if e < len(rows) else "")
    return text, after, reading(case, rows, after, (s, i1, i2, e))


READINGS = ("one place", "several places", "weak side", "target breaks")


def reading(case: NextEditCase, rows: list[str], after: str, span: tuple[int, int, int, int]) -> str:
    """What the snippet's context lines (rows [s, i1) before the hunk's rows [i1, i2), [i2, e) after) tell of
    its place: ``target breaks``: the file after the hunk alone does not parse where the file does (Python; a
    hunk of a larger change), so a merge that keeps the file parsing cannot reach it; ``weak side``: a side's
    context (not at the file's edge) holds only blank lines and brackets; ``several places``: the lines before
    and the lines after stand together (the after lines at most 40 rows, or twice the hunk's rows, below) at more
    than one place, where only the changed lines can tell them apart; else ``one place``."""
    s, i1, i2, e = span
    if case.language == "python" and _parses(case.document) and not _parses(after):
        return "target breaks"
    if (s < i1 and not any(len(x.strip()) > 3 for x in rows[s:i1])) or \
            (i2 < e and not any(len(x.strip()) > 3 for x in rows[i2:e])):
        return "weak side"
    pre, post = rows[s:i1], rows[i2:e]
    ends = [p for p in range(len(pre), len(rows) + 1) if rows[p - len(pre) : p] == pre] if s > 0 else [0]
    starts = [q for q in range(len(rows) + 1) if rows[q : q + len(post)] == post] if e < len(rows) else [len(rows)]
    reach = max(40, 2 * (i2 - i1))
    places = sum(1 for p in ends for q in starts if p <= q <= p + reach)
    return "several places" if places > 1 else "one place"


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def run(cases: list[NextEditCase], context: int, nonblank: bool = False) -> dict[str, Any]:
    counts = {"cases": 0, "exact": 0, "refused": 0, "wrong": 0, "lost": 0}
    by_reading = {k: {"cases": 0, "exact": 0, "refused": 0, "wrong": 0} for k in READINGS}
    wrong: list[str] = []
    ms: list[float] = []
    for c in cases:
        got = _cut(c, context, nonblank)
        if got is None:
            continue
        update, target, how = got
        counts["cases"] += 1
        by_reading[how]["cases"] += 1
        t = time.perf_counter()
        try:
            text = merge(c.document, update, c.language).text
        except ValueError:
            counts["refused"] += 1
            by_reading[how]["refused"] += 1
            continue
        finally:
            ms.append((time.perf_counter() - t) * 1e3)
        outcome = "exact" if text == target else "wrong"
        counts[outcome] += 1
        by_reading[how][outcome] += 1
        if outcome == "wrong":
            counts["lost"] += bool(lost_lines(text, target))
            wrong.append(c.case_id)
    ms.sort()
    return {"context": context, **counts, "p50_ms": ms[len(ms) // 2] if ms else 0.0, "by_reading": by_reading,
            "wrong_ids": wrong}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", choices=("history", "releases"), default="history")
    p.add_argument("--repo", help="--set history: the git repository (default: the one this package is in)")
    p.add_argument("--data", help="--set releases: the folder release_edits.py wrote (default runs/release_edits)")
    p.add_argument("--context", type=int, nargs="+", default=[1, 2, 5], help="context lines around each hunk")
    p.add_argument("--count", choices=("lines", "nonblank", "both"), default="both",
                   help="context counted in lines (blank ones too), in non-blank lines, or both (a row each)")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    cases = history_cases(a.repo, 100_000) if a.set == "history" else release_cases(a.data)
    modes = {"lines": [False], "nonblank": [True], "both": [False, True]}[a.count]
    rows = [{**run(cases, k, nb), "count": "nonblank" if nb else "lines"} for nb in modes for k in a.context]
    print(f"apply on real hunks ({a.set}): exact / refused / wrong merges, of the cases")
    print(f"{'context':>9} {'counted':>9} {'cases':>6} {'exact':>6} {'refused':>8} {'wrong':>6} {'lost':>5} "
          f"{'p50 ms':>7}")
    for r in rows:
        print(f"{r['context']:>9} {r['count']:>9} {r['cases']:>6} {r['exact']:>6} {r['refused']:>8} {r['wrong']:>6} "
              f"{r['lost']:>5} {r['p50_ms']:>7.1f}")
    print("\nby what the snippet's context tells of its place (reading): cases, exact / refused / wrong")
    print(f"{'context':>9} {'counted':>9} " + " ".join(f"{k:>24}" for k in READINGS))
    for r in rows:
        cells = [f"{b['cases']:>5}: {b['exact']:>4} / {b['refused']:>3} / {b['wrong']:>3}"
                 for b in (r["by_reading"][k] for k in READINGS)]
        print(f"{r['context']:>9} {r['count']:>9} " + " ".join(f"{x:>24}" for x in cells))
    if a.json:
        Path(a.json).write_text(json.dumps({"set": a.set, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
