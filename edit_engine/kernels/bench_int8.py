"""CPU benchmark of the int8 linear layer (kernels/int8.py) against float32 and bf16 ``F.linear``.

    python -m edit_engine.kernels.bench_int8 [--threads 1] [--json out.json]

One row per shape of the packaged model's denoising pass (canvas rows x in -> out features) and of a context
encoding (1,024 rows): median microseconds of each path over repeated calls on the same inputs (warm caches),
the speed-up of int8 over float32, and int8's largest error relative to float32's largest output. The bf16 column
runs ``F.linear`` on bf16 copies (fast only on CPUs with avx512_bf16 or AMX).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from edit_engine.kernels.int8 import default_qmax, gemm_ok, int8_linear, quantize_weight

# (rows, in, out): the small preset's projections (qkv, out, gate+up, down) and its tied head.
FEATURES = [(256, 768), (256, 256), (256, 1408), (704, 256), (256, 8192)]
ROWS = (8, 32, 1024)


def _median_us(fn: Callable[[], Any], budget_s: float = 0.3) -> float:
    for _ in range(3):
        fn()
    times: list[float] = []
    end = time.perf_counter() + budget_s
    while len(times) < 5 or (time.perf_counter() < end and len(times) < 2000):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or platform.machine()


def run(threads: int) -> list[dict[str, Any]]:
    if threads > 0:
        torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    qmax = default_qmax()
    gemm = gemm_ok(qmax)
    rows = []
    for m in ROWS:
        for k, n in FEATURES:
            x = torch.randn(m, k, generator=g)
            w = torch.randn(n, k, generator=g) * 0.05
            q, s = quantize_weight(w, qmax)
            xb, wb = x.bfloat16(), w.bfloat16()
            ref = F.linear(x, w)
            err = float((int8_linear(x, q, s, gemm) - ref).abs().max() / ref.abs().max())
            f32 = _median_us(lambda: F.linear(x, w))  # noqa: B023 (called before the loop moves on)
            bf16 = _median_us(lambda: F.linear(xb, wb))  # noqa: B023
            i8 = _median_us(lambda: int8_linear(x, q, s, gemm))  # noqa: B023
            rows.append({"rows": m, "in": k, "out": n, "float32_us": round(f32, 1), "bf16_us": round(bf16, 1),
                         "int8_us": round(i8, 1), "speedup": round(f32 / i8, 2), "rel_err": round(err, 5),
                         "weight_qmax": qmax, "int8_gemm": gemm})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    cols = ("rows", "in", "out", "float32 us", "bf16 us", "int8 us", "speed-up", "rel err")
    widths = (5, 5, 5, 11, 9, 9, 9, 8)
    lines = [" ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=True))]
    for r in rows:
        lines.append(f"{r['rows']:>5} {r['in']:>5} {r['out']:>5} {r['float32_us']:>11.1f} {r['bf16_us']:>9.1f} "
                     f"{r['int8_us']:>9.1f} {r['speedup']:>8.2f}x {r['rel_err']:>8.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(prog="python -m edit_engine.kernels.bench_int8", description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    a = ap.parse_args(argv)
    rows = run(a.threads)
    print(table(rows))
    if a.json:
        meta = {"machine": _cpu(), "torch": torch.__version__,
                "threads": torch.get_num_threads()}
        with open(a.json, "w") as f:
            json.dump({**meta, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
