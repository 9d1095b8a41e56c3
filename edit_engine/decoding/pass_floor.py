"""One denoising pass against this machine's floors (``edit-engine bench``'s "pass" rows).

For our model at the served context and a few canvas sizes: the pass's time (``canvas_logits``, the default
dtype), its arithmetic (the multiply-adds of its projections, attention and head, counted from the shapes), and
two floors measured in the same run:

- **arithmetic**: the arithmetic at this machine's measured GEMM throughput (a large matmul in the model's dtype,
  the best a well-shaped product reaches on these threads);
- **overhead**: the same pass on a model of the same depth and op sequence at width 8 and a vocabulary of 64, whose
  arithmetic is nil: what Python, the per-op dispatch and small allocations cost per pass.

``ratio`` = pass / (arithmetic floor + overhead floor): how far the pass is from both floors together.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from edit_engine.model.network import DiffusionLM, ModelConfig

SIZES = (8, 16, 32, 64)


@dataclass(frozen=True)
class PassRow:
    canvas: int
    context_tokens: int
    pass_ms: float
    gflop: float  # arithmetic of one pass (multiply-adds x 2), in GFLOP
    arithmetic_floor_ms: float
    overhead_floor_ms: float
    ratio: float  # pass_ms / (arithmetic + overhead floors)


def _median_ms(fn: Callable[[], Any], reps: int, sync: Callable[[], None]) -> float:
    for _ in range(3):
        fn()
    sync()
    xs = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        xs.append((time.perf_counter() - t) * 1e3)
    return statistics.median(xs)


def pass_gflop(cfg: ModelConfig, canvas: int, context: int) -> float:
    """Multiply-adds x 2 of one canvas pass: the projections and the head on ``canvas`` rows, attention of those
    rows over ``context + canvas`` keys (scores and the weighted sum)."""
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    proj = d * 3 * d + d * d + d * 2 * f + f * d  # wqkv, wo, w13, w2
    attn = 2 * (context + canvas) * d
    return 2 * canvas * (cfg.n_layers * (proj + attn) + d * v) / 1e9


def gemm_gflops(dtype: torch.dtype, device: torch.device, reps: int = 10) -> float:
    """This machine's GEMM throughput in ``dtype`` (GFLOP/s): a 1024 x 1024 by 1024 x 1024 product (float32 for
    an int8 model, whose activations are float32 outside its int8 layers)."""
    dt = torch.float32 if dtype == torch.int8 else dtype
    a = torch.randn(1024, 1024, device=device).to(dt)
    b = torch.randn(1024, 1024, device=device).to(dt)
    ms = _median_ms(lambda: a @ b, reps, _sync(device))
    return 2 * 1024**3 / (ms * 1e6)


def _sync(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def overhead_model(cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> DiffusionLM:
    """``cfg``'s depth and op sequence at width 8, vocabulary 64: a pass of it is overhead only."""
    small = replace(cfg, d_model=8, n_heads=2, d_ff=16, vocab_size=64)
    return DiffusionLM(small).to(device=device, dtype=dtype).eval().requires_grad_(False)


def pass_rows(model: DiffusionLM, prefix: list[int], suffix: list[int], mask_id: int, reps: int = 20,
              sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """The pass rows for ``model`` at the context ``prefix`` + ``suffix`` (token ids): one per canvas size."""
    dev = model.device
    sync = _sync(dev)
    dtype = model.embed.weight.dtype
    gflops = gemm_gflops(torch.int8 if model.int8 else dtype, dev)
    tiny = overhead_model(model.cfg, dev, dtype)
    cap = max(sizes)
    cache = model.encode_context([prefix], [suffix], cap)
    tiny_cache = tiny.encode_context([[t % 60 + 3 for t in prefix]], [[t % 60 + 3 for t in suffix]], cap)
    ctx = len(prefix) + len(suffix)
    rows = []
    for c in sizes:
        canvas = torch.full((1, c), mask_id, dtype=torch.long, device=dev)
        ms = _median_ms(functools.partial(model.canvas_logits, canvas, cache), reps, sync)
        over = _median_ms(functools.partial(tiny.canvas_logits, canvas.clamp(max=63), tiny_cache), reps, sync)
        g = pass_gflop(model.cfg, c, ctx)
        arith = g / gflops * 1e3
        rows.append(PassRow(c, ctx, round(ms, 3), round(g, 4), round(arith, 3), round(over, 3),
                            round(ms / (arith + over), 2)))
    return {"gemm_gflops": round(gflops, 1), "dtype": "int8" if model.int8 else str(dtype).replace("torch.", ""),
            "rows": [r.__dict__ for r in rows]}


def table(p: dict[str, Any]) -> list[str]:
    out = [f"pass against the floors ({p['dtype']}; GEMM {p['gemm_gflops']:.0f} GFLOP/s measured here):",
           "  canvas  context   pass ms    GFLOP  arith floor  overhead floor  ratio"]
    for r in p["rows"]:
        out.append(f"  {r['canvas']:6d}  {r['context_tokens']:7d}  {r['pass_ms']:8.2f}  {r['gflop']:7.3f}  "
                   f"{r['arithmetic_floor_ms']:11.2f}  {r['overhead_floor_ms']:14.2f}  {r['ratio']:5.2f}")
    return out

