"""How well a model judges the drafts on its canvas: the verdict that remasking reads, measured on held-out code.

    python scripts/remask_verdict.py [--model DIR] [--holes functions|lines] [--n 200] [--floor 6] [--spread 1]

Fills the held-out holes of ``scripts/sweep_commit.py`` at the given floor without remasking and, in every pass
after the first, reads the model's probability of each committed real token (``SamplerConfig.remask`` compares
exactly this with its bar). A token's verdict is that probability in the first pass that sees it committed. Each
judged token is right when it equals the true hole's token at the same slot. Reports the AUC of the verdict
(the chance a right token gets a higher probability than a wrong one; 0.5 = no judgement) and, for several
bars, the share of wrong and of right tokens below it (what remasking at that bar would send back). Prints a
table and the JSON object (``--json FILE`` writes it). The reading replaces ``sampler.remask_drafts`` from outside
with one that only reads, so nothing is remasked and the fills are those of the plain sampler.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

BARS = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5)


def auc(right: list[float], wrong: list[float]) -> float | None:
    """P(a right token's verdict > a wrong one's), ties counted half (Mann-Whitney)."""
    if not right or not wrong:
        return None
    import torch

    r, w = torch.tensor(right, dtype=torch.float64), torch.tensor(wrong, dtype=torch.float64)
    allv = torch.cat([r, w])
    order = allv.argsort()
    ranks = torch.empty_like(allv)
    ranks[order] = torch.arange(1, len(allv) + 1, dtype=torch.float64)
    for v in allv.unique():  # average ranks over ties
        tie = allv == v
        ranks[tie] = ranks[tie].mean()
    return float((ranks[: len(r)].sum() - len(r) * (len(r) + 1) / 2) / (len(r) * len(w)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    p.add_argument("--holes", choices=("functions", "lines"), default="functions")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--floor", type=int, default=6)
    p.add_argument("--spread", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the result here")
    a = p.parse_args(argv)

    import torch
    from sweep_commit import function_holes, holes

    from edit_engine import Engine, sampler

    eng = Engine.load(a.model, threads=a.threads)
    tok = eng.tokenizer
    cases = function_holes(a.n) if a.holes == "functions" else holes(a.n)
    right: list[float] = []
    wrong: list[float] = []
    state: dict[str, Any] = {}
    real = sampler.remask_drafts

    def judged(logits: Any, canvas: Any, masked: Any, budget: Any, cfg: Any, pad_id: int, mask_id: int) -> Any:
        prob = torch.softmax(logits.float(), -1).gather(-1, canvas.unsqueeze(-1)).squeeze(-1)[0]
        c = canvas[0]
        truth = state["truth"]
        for j in ((~masked[0]) & (c != pad_id) & (c != mask_id)).nonzero().flatten().tolist():
            if j in state["seen"]:
                continue
            state["seen"].add(j)
            ok = j < len(truth) and int(c[j]) == truth[j]
            (right if ok else wrong).append(float(prob[j]))
        return torch.zeros_like(masked)  # nothing goes back: the fills are the plain sampler's

    sampler.remask_drafts = judged
    try:
        for pre, suf, line, *_ in cases:
            state["truth"], state["seen"] = tok.encode(line), set()
            # remask > 0 makes the sampler call remask_drafts (the wrapper above, which sends nothing back)
            eng.infill(pre, suf, max_tokens=64, min_commit=a.floor, spread=a.spread, line_stop=True,
                       remask=1e-12)
    finally:
        sampler.remask_drafts = real
    res: dict[str, Any] = {
        "model": str(eng.path), "holes": a.holes, "n": len(cases), "floor": a.floor, "spread": a.spread,
        "judged": len(right) + len(wrong), "right_share": len(right) / max(1, len(right) + len(wrong)),
        "auc": auc(right, wrong),
        "below": {str(b): {"wrong": sum(x < b for x in wrong) / max(1, len(wrong)),
                           "right": sum(x < b for x in right) / max(1, len(right))} for b in BARS},
        "command": " ".join(["scripts/remask_verdict.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    print(f"{res['judged']} drafts judged, {res['right_share']:.1%} right at their slot; verdict AUC "
          f"{'-' if res['auc'] is None else format(res['auc'], '.3f')}")
    print(f"{'bar':>6}{'wrong below':>13}{'right below':>13}")
    for b in BARS:
        row = res["below"][str(b)]
        print(f"{b:>6}{row['wrong']:>13.1%}{row['right']:>13.1%}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
