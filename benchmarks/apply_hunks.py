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
lines the edit deleted, or double some). Prints a table; ``--json PATH`` writes the counts and the ids of the
wrong merges.

Development sets: this repository's history, and the release histories of the edit model's training packages
(``release_edits.py --set train``, 1,612 hunks). The held-out release set is for reporting.

    python benchmarks/apply_hunks.py --set history --context 1 2 5 --json runs/apply_hunks.json
    python benchmarks/release_edits.py --set train --out runs/edit_train_releases
    python benchmarks/apply_hunks.py --set releases --data runs/edit_train_releases
    python benchmarks/apply_hunks.py --set releases --data runs/release_edits
"""

from __future__ import annotations

import argparse
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
    return text, after


def run(cases: list[NextEditCase], context: int, nonblank: bool = False) -> dict[str, Any]:
    counts = {"cases": 0, "exact": 0, "refused": 0, "wrong": 0, "lost": 0}
    wrong: list[str] = []
    ms: list[float] = []
    for c in cases:
        got = snippet(c, context, nonblank)
        if got is None:
            continue
        update, target = got
        counts["cases"] += 1
        t = time.perf_counter()
        try:
            text = merge(c.document, update, c.language).text
        except ValueError:
            counts["refused"] += 1
            continue
        finally:
            ms.append((time.perf_counter() - t) * 1e3)
        if text == target:
            counts["exact"] += 1
        else:
            counts["wrong"] += 1
            counts["lost"] += bool(lost_lines(text, target))
            wrong.append(c.case_id)
    ms.sort()
    return {"context": context, **counts, "p50_ms": ms[len(ms) // 2] if ms else 0.0, "wrong_ids": wrong}


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
    if a.json:
        Path(a.json).write_text(json.dumps({"set": a.set, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
