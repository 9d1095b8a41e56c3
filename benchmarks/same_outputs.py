"""Dump what the engine answers on fixed benchmark tasks, to show that a change which should not change
answers (a move, a refactor) leaves them byte-identical: run it under each tree and compare the files.

    PYTHONPATH=OLD_TREE python benchmarks/same_outputs.py --out before.jsonl
    PYTHONPATH=NEW_TREE python benchmarks/same_outputs.py --out after.jsonl
    cmp before.jsonl after.jsonl

One line per task: HumanEval single-line and SantaCoder-FIM (Python, JavaScript) holes through ``infill`` and
``complete``; next-edit cases with their region through ``next_edit``. The memory of code is off (it did not
exist in older trees), one thread, float32, seed 0. ``--data``: the benchmarks folder (default
``../shared/benchmarks``); this reads the evaluation sets and tunes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSONL file to write")
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"))
    ap.add_argument("--limit", type=int, default=60, help="tasks per set (default 60)")
    a = ap.parse_args()
    os.environ["EDIT_ENGINE_MEMORY"] = "off"
    import torch

    from edit_engine import Engine
    from edit_engine.eval.benchmarks import load
    from edit_engine.eval.next_edit_set import load_cases

    torch.set_num_threads(1)
    engine = Engine.load(threads=1, dtype="float32")
    tasks = (load("humaneval-single", a.data, "python", a.limit) + load("santacoder-fim", a.data, "python", a.limit)
             + load("santacoder-fim", a.data, "javascript", a.limit))
    with open(a.out, "w", encoding="utf-8") as out:
        for t in tasks:
            r = engine.infill(t.prefix, t.suffix, t.language)
            c = engine.complete(t.prefix + t.suffix, len(t.prefix), t.language)
            out.write(json.dumps({"id": t.task_id, "infill": r.text, "nfe": r.nfe,
                                  "complete": [c.text, c.start, c.end, c.source]}) + "\n")
        cases = load_cases(a.data, a.limit)
        for case in cases:
            ne = engine.next_edit(case.document, case.cursor, list(case.history), case.language,
                                  region=(case.first, case.last))
            out.write(json.dumps({"id": case.case_id, "next": None if ne is None else [ne.start, ne.end, ne.text]})
                      + "\n")
    print(f"{len(tasks)} holes and {len(cases)} next-edit cases written to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
