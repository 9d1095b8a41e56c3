"""Who commits the slots: the confidence threshold or the floor? Measured on held-out code.

    python scripts/floor_share.py [--model DIR] [--holes functions|lines] [--n 100] [--floor 6] [--spread 1]

Fills the held-out holes of ``scripts/sweep_commit.py`` with the greedy fast sampler and counts, over every pass
after the first (the first pass decides the fill length through ``sampler.commit_pass``; the later ones commit
through ``kernels.commit_from_stats``), the slots committed because their score reached the threshold and those
committed by the floor (``min_commit``) below it, with the median score of the floor's picks. When the floor
commits nearly everything, the threshold plays no part and the floor alone sets the speed and the quality.
Prints a table and the JSON object (``--json FILE`` writes it). The counting wraps the commit kernel's dispatcher
(``kernels.commit_from_stats``) from outside; the engine is not changed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    p.add_argument("--holes", choices=("functions", "lines"), default="functions")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--floor", type=int, default=6, help="min_commit (the packaged sampler.json's is 6)")
    p.add_argument("--spread", type=int, default=1)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the result here")
    a = p.parse_args(argv)

    from sweep_commit import function_holes, holes

    from edit_engine import kernels
    from edit_engine import Engine, sampler

    counts: dict[str, Any] = {"passes": 0, "threshold": 0, "floor": 0, "floor_scores": []}
    real = kernels.commit_from_stats

    def counted(idx: Any, sc: Any, canvas: Any, masked: Any, threshold: float, *rest: Any, **kw: Any) -> Any:
        before = masked.clone()
        out = real(idx, sc, canvas, masked, threshold, *rest, **kw)
        s = sc[before & ~masked].float()
        counts["passes"] += 1
        counts["threshold"] += int((s >= threshold).sum())
        counts["floor"] += int((s < threshold).sum())
        counts["floor_scores"] += s[s < threshold].tolist()
        return out

    eng = Engine.load(a.model, threads=a.threads)
    cases = function_holes(a.n) if a.holes == "functions" else holes(a.n)
    nfe = toks = 0
    sampler.kernels.commit_from_stats = counted  # the sampler calls it through the kernels module
    try:
        for pre, suf, *_ in cases:
            r = eng.infill(pre, suf, max_tokens=64, min_commit=a.floor, spread=a.spread, threshold=a.threshold,
                           line_stop=True)
            nfe += r.nfe
            toks += r.tokens
    finally:
        sampler.kernels.commit_from_stats = real
    committed = counts["threshold"] + counts["floor"]
    fs = counts["floor_scores"]
    res = {"model": str(eng.path), "holes": a.holes, "n": len(cases), "floor": a.floor, "spread": a.spread,
           "threshold": a.threshold, "later_passes": counts["passes"], "by_threshold": counts["threshold"],
           "by_floor": counts["floor"], "floor_share": counts["floor"] / max(1, committed),
           "floor_score_median": statistics.median(fs) if fs else None, "nfe_per_token": nfe / max(1, toks),
           "command": " ".join(["scripts/floor_share.py", *(argv if argv is not None else sys.argv[1:])])}
    med = "-" if res["floor_score_median"] is None else f"{res['floor_score_median']:.3f}"
    print(f"{'holes':<10}{'passes':>8}{'by threshold':>14}{'by floor':>10}{'floor share':>13}{'floor score p50':>17}"
          f"{'nfe/token':>11}")
    print(f"{a.holes:<10}{res['later_passes']:>8}{res['by_threshold']:>14}{res['by_floor']:>10}"
          f"{res['floor_share']:>13.3f}{med:>17}{res['nfe_per_token']:>11.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
