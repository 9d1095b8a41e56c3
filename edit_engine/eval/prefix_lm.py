"""The same weights as the diffusion rows, decoded left to right: a reference point for diffusion against
autoregressive decoding at exactly equal training compute.

Every diffusion checkpoint of this project is also a causal language model on its prefix rows: training adds
0.5 x next-token loss there (docs/training.md), and ``DiffusionLM.edit_context`` returns the appended tokens'
hidden states. This module decodes each benchmark hole greedily from those states, one token per forward pass,
until the first token that holds a newline or the end-of-text token. It sees the prefix only, never the suffix;
the prefix-suffix-middle AR baseline (``edit-engine train --objective ar``) is the one that sees both. The fills
are scored by the same harness as ``edit-engine eval`` (model fills, truncated to the hole's line).

    python -m edit_engine.eval.prefix_lm --benchmark humaneval-single --limit 300 --json --out FILE.jsonl
    python -m edit_engine.eval.prefix_lm --benchmark santacoder-fim --language python --limit 300 --json

Prints the harness's table, or with --json its JSON object (last line), with ``"fill": "prefix-lm"``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING

import torch

from edit_engine.decoding.ar import next_token
from edit_engine.eval.benchmarks import Task
from edit_engine.eval.harness import Fill, Filler

if TYPE_CHECKING:
    from edit_engine.engine import Engine


def prefix_lm_filler(engine: Engine, max_tokens: int = 64, novel_penalty: float = 0.0) -> Filler:
    """A harness ``Filler``: greedy left-to-right decoding from the causal prefix rows (module doc)."""
    model, tok = engine.model, engine.tokenizer

    def fill(task: Task) -> Fill:
        t0 = time.perf_counter()
        p_ids, s_ids = engine.context_ids(task.prefix, task.suffix)
        if not p_ids:
            return Fill("", 0, 0, (time.perf_counter() - t0) * 1e3, "complete")
        cfg = engine.sampler_for({"novel_penalty": novel_penalty})
        bias = engine.novelty_bias(p_ids, s_ids, task.language, cfg)
        with torch.no_grad():
            cache = model.encode_context([p_ids[:-1]], [[]], 0)  # the prefix alone: its rows are causal
            h = model.edit_context(cache, len(p_ids) - 1, [p_ids[-1]])
            out: list[int] = []
            stop = "length"
            while len(out) < max_tokens:
                t = next_token(model, tok, h[:, -1], allow_eos=True, bias=bias)  # the AR baseline's greedy rule
                if t == tok.eos_id:
                    stop = "complete"
                    break
                out.append(t)
                if "\n" in tok.decode([t]):
                    stop = "line"
                    break
                h = model.extend_prefix(cache, [t])
        nfe = len(out) + (stop == "complete")
        return Fill(tok.decode(out), nfe, len(out), (time.perf_counter() - t0) * 1e3, stop)

    return fill


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edit_engine.eval.prefix_lm",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--benchmark", default="humaneval-single")
    ap.add_argument("--language", default="python")
    ap.add_argument("--data", help="benchmark directory (default: ../shared/benchmarks)")
    ap.add_argument("--limit", type=int, help="first N tasks")
    ap.add_argument("--model", help="diffusion checkpoint directory (default: the packaged model)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--novel-penalty", type=float, default=0.0, help="the sampler's novel-name penalty (0 = off)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="per-task JSON lines")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from edit_engine import Engine
    from edit_engine.eval.benchmarks import load
    from edit_engine.eval.harness import TaskResult, evaluate

    engine = Engine.load(a.model, threads=a.threads)
    if engine.is_ar:
        ap.error("--model: an autoregressive checkpoint; use edit-engine eval for it")
    tasks = load(a.benchmark, a.data, a.language, a.limit)
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(a.out, "w", encoding="utf-8")) if a.out else None

        def write(r: TaskResult) -> None:
            if out is not None:
                out.write(json.dumps(dataclasses.asdict(r)) + "\n")

        report, _ = evaluate(tasks, prefix_lm_filler(engine, a.max_tokens, a.novel_penalty), benchmark=a.benchmark,
                             fill_kind="prefix-lm", progress=False, model=str(engine.path or ""),
                             on_result=write if out is not None else None)
    report.extra["novel_penalty"] = a.novel_penalty
    print(json.dumps(report.to_json()) if a.json else report.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
