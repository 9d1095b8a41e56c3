"""Two runs of one benchmark compared task by task: the paired difference of edit similarity and what was solved.

    edit-engine eval --benchmark B ... --out A.jsonl ; edit-engine eval --benchmark B ... --out B.jsonl
    python benchmarks/pair_runs.py A.jsonl B.jsonl [--json OUT]

Prints one line and, with ``--json``, writes the same figures: tasks in both runs (matched by ``task_id``), the
mean of B's edit similarity minus A's (0-100) with its standard error, how many tasks B fills closer and farther,
the tasks B solves that A does not (gained) and the reverse (lost), and how many fills are identical. This is the
comparison behind the paired figures in MODEL.md and docs/results-archive-2026-12-05.md.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any


def load(path: str) -> dict[str, dict[str, Any]]:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {str(r["task_id"]): r for r in rows}


def pair(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ids = [k for k in a if k in b]
    if not ids:
        raise ValueError("the two runs share no task_id")
    d = [100 * (float(b[k]["edit_sim"]) - float(a[k]["edit_sim"])) for k in ids]
    n = len(d)
    mean = sum(d) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n > 1 else 0.0
    return {
        "n": n, "edit_sim_diff": round(mean, 3), "se": round(se, 3),
        "closer": sum(x > 0 for x in d), "farther": sum(x < 0 for x in d),
        "solved_a": sum(bool(a[k]["passed"]) for k in ids), "solved_b": sum(bool(b[k]["passed"]) for k in ids),
        "gained": sum(bool(b[k]["passed"]) and not bool(a[k]["passed"]) for k in ids),
        "lost": sum(bool(a[k]["passed"]) and not bool(b[k]["passed"]) for k in ids),
        "identical": sum(a[k]["completion"] == b[k]["completion"] for k in ids),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("a", help="per-task JSONL of the baseline run (edit-engine eval --out)")
    ap.add_argument("b", help="per-task JSONL of the run compared with it")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    try:
        r = pair(load(args.a), load(args.b))
    except ValueError as e:
        ap.error(str(e))
    print(f"n {r['n']}: edit sim B - A {r['edit_sim_diff']:+.2f} (SE {r['se']:.2f}); closer {r['closer']}, "
          f"farther {r['farther']}; solved {r['solved_a']} -> {r['solved_b']} (gained {r['gained']}, lost "
          f"{r['lost']}); identical fills {r['identical']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
