"""Fit the show gate (``edit_engine.engine.gate``) on the typing replay's development split.

    python -m edit_engine.eval.typing_replay --split dev --language python --limit 0 --fill engine \\
        --show-threshold 0 --modes line --record runs/gate_dev.jsonl          # every answer shown, recorded
    python -m edit_engine.eval.gate_fit runs/gate_dev.jsonl --target 0.4 --out edit_engine/engine/gate.json

Each record is one shown suggestion (``typing_replay._record``): its text, source and score, and whether a
person took it (whole or its first line). Per source, a logistic regression over ``gate.FEATURES`` (fitted by
iteratively reweighted least squares with a small ridge, so a source with few records stays near its base
rate). The threshold is the lowest estimate at which the suggestions kept are accepted at least ``--target``
of the time on these records (the characters they would write, and what the threshold hides, are printed per
threshold). The replay with the gate on measures the result; these records only choose it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from edit_engine.engine.gate import FEATURES, ShowGate, features

RIDGE = 1.0


def fit_logistic(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE, steps: int = 50) -> np.ndarray:
    """Weights ``w`` of ``P(y=1) = sigmoid(x @ w)`` (IRLS with an L2 penalty on all but the bias)."""
    w = np.zeros(x.shape[1])
    penalty = np.eye(x.shape[1]) * ridge
    penalty[0, 0] = 1e-6
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -50, 50)))
        grad = x.T @ (p - y) + penalty @ w
        hess = (x * (p * (1 - p))[:, None]).T @ x + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def fit(records: list[dict[str, Any]]) -> dict[str, tuple[float, ...]]:
    """Per-source weights over ``FEATURES``."""
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_source[r["source"]].append(r)
    weights = {}
    for source, rows in sorted(by_source.items()):
        x = np.array([features(r["text"], r.get("score") or 0.0, r.get("line_before", "")) for r in rows])
        y = np.array([float(r["accepted"]) for r in rows])
        weights[source] = tuple(round(float(v), 4) for v in fit_logistic(x, y))
    return weights


def sweep(records: list[dict[str, Any]], gate: ShowGate,
          thresholds: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)) -> list[dict[str, Any]]:
    """Per threshold: the suggestions kept, their acceptance and the characters they write (on the records)."""
    est = [gate.estimate(r["text"], r["source"], r.get("score") or 0.0, r.get("line_before", "")) for r in records]
    rows = []
    for t in thresholds:
        kept = [r for r, e in zip(records, est, strict=True) if e >= t]
        acc = [r for r in kept if r["accepted"]]
        rows.append({"threshold": t, "shown": len(kept), "accepted": len(acc),
                     "acceptance": len(acc) / len(kept) if kept else 0.0,
                     "chars": sum(r["accepted_chars"] for r in acc)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("records", nargs="+", help="JSON lines from typing_replay --record")
    p.add_argument("--target", type=float, default=0.4, help="acceptance the threshold must reach on the records")
    p.add_argument("--out", default=None, help="write the gate here (gate.json)")
    p.add_argument("--min-chars", type=int, default=2,
                   help="the fewest non-blank characters a suggestion the gate may hide writes (gate.json's min_chars)")
    a = p.parse_args(argv)
    records = [json.loads(line) for f in a.records for line in Path(f).read_text().splitlines() if line.strip()]
    if not records:
        print("no records", file=sys.stderr)
        return 1
    weights = fit(records)
    rows = sweep(records, ShowGate(weights))
    print(f"{len(records)} suggestions; weights over {', '.join(FEATURES)}:")
    for source, w in weights.items():
        print(f"  {source:8s} {w}")
    print(f"{'threshold':>9} {'shown':>7} {'accepted':>8} {'acceptance':>10} {'chars':>7}")
    for r in rows:
        print(f"{r['threshold']:9.2f} {r['shown']:7d} {r['accepted']:8d} {r['acceptance']:10.1%} {r['chars']:7d}")
    chosen = next((r["threshold"] for r in rows if r["acceptance"] >= a.target), rows[-1]["threshold"])
    print(f"threshold for acceptance >= {a.target:.0%}: {chosen}")
    if a.out:
        Path(a.out).write_text(json.dumps({"features": list(FEATURES), "weights": weights, "threshold": chosen,
                                           "min_chars": a.min_chars,
                                           "fitted_on": sorted({str(f) for f in a.records}),
                                           "records": len(records)}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
