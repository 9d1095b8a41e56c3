"""What helps the CPU path, measured: one denoising pass (16 canvas slots against 1,024 cached context tokens)
and one context encode, for fp32 eager, bf16 weights, ``torch.compile`` of the pass, and 1 vs 2 threads.

    python scripts/measure_cpu_path.py [--model DIR] [--json OUT]

Prints a table (median ms over repeats after warm-up) and writes JSON. The engine's defaults follow it
(BENCHMARKS.md, "The CPU path, measured").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch


def _median_ms(fn: Callable[[], object], reps: int, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def measure(path: str | None, variant: str, threads: int, context: int, canvas_slots: int,
            reps: int) -> dict[str, Any]:
    from edit_engine import checkpoint

    dtype = torch.bfloat16 if variant == "bf16" else torch.float32
    model = checkpoint.load(path, dtype=dtype).model
    g = torch.Generator().manual_seed(0)
    V = model.cfg.vocab_size
    p_len = min(model.cfg.max_prefix, context * 3 // 4)
    s_len = min(model.cfg.max_suffix, context - p_len)
    pre = torch.randint(3, V, (p_len,), generator=g).tolist()
    suf = torch.randint(3, V, (s_len,), generator=g).tolist()
    canvas = torch.full((1, canvas_slots), 1, dtype=torch.long)
    cache = model.encode_context([pre], [suf], capacity=canvas_slots)

    def step(c: torch.Tensor) -> torch.Tensor:
        return model.canvas_logits(c, cache)

    run: Callable[[torch.Tensor], torch.Tensor] = step
    note = ""
    if variant.endswith("compile"):
        try:
            run = torch.compile(step, dynamic=False)
            t = time.perf_counter()
            run(canvas)
            note = f"compiled in {time.perf_counter() - t:.1f} s"
        except Exception as e:  # no compiler: say so, measure nothing
            return {"threads": threads, "variant": variant, "error": str(e)[:200]}
    with torch.no_grad():
        pass_ms = _median_ms(lambda: run(canvas), reps)
        enc_ms = _median_ms(lambda: model.encode_context([pre], [suf], capacity=canvas_slots), max(3, reps // 4),
                            warm=1)
    return {"threads": threads, "variant": variant, "pass_ms": pass_ms, "encode_ms": enc_ms,
            "context_tokens": p_len + s_len, "canvas": canvas_slots, "note": note}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--canvas", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for variant in ("fp32", "bf16", "fp32+compile"):
            row = measure(a.model, variant, threads, a.context, a.canvas, a.reps)
            rows.append(row)
            print(f"threads {threads}  {variant:<14} pass {row.get('pass_ms', float('nan')):8.2f} ms   encode "
                  f"{row.get('encode_ms', float('nan')):8.1f} ms  {row.get('note', row.get('error', ''))}",
                  flush=True)
    res = {"rows": rows, "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "command": " ".join(sys.argv)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
