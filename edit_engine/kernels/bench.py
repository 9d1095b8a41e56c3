"""Benchmark every Triton kernel against its PyTorch twin: ``python -m edit_engine.kernels.bench [--json PATH]``.

Prints one row per (op, shape): time of the Triton kernel and of the twin, the bytes the op must move at least,
the bandwidth the kernel achieved (bytes / time), the floor (bytes / ``--peak-gbps``) and the speed-up over the
twin, plus the largest difference from the twin (a GPU correctness check; the tests run only the interpreter).
Writes the same rows as JSON (default ``kernels-bench.json``). Needs a CUDA GPU; the whole run takes about two
minutes on one H100/H200 (most of it Triton compiling). ``--smoke`` runs tiny shapes on the CPU under the Triton
interpreter, to check the script itself; its timings mean nothing.

What each floor counts is explained in kernels/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from edit_engine.kernels.rules import CommitRule

H200_PEAK_GBPS = 4800.0  # HBM3e, NVIDIA's data sheet figure


@dataclass
class Row:
    op: str
    shape: str
    dtype: str
    bytes: int
    triton_ms: float
    torch_ms: float
    gbps: float  # achieved by the Triton kernel
    floor_ms: float  # bytes / peak bandwidth
    of_peak: float  # floor_ms / triton_ms
    speedup: float  # torch_ms / triton_ms
    max_err: float  # largest |triton - twin| over the compared outputs


@dataclass
class Case:
    op: str
    shape: str
    dtype: torch.dtype
    bytes: int
    triton: Callable[[], Any]
    torch: Callable[[], Any]
    err: Callable[[], float]


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _max_err(a: Any, b: Any) -> float:
    if isinstance(a, tuple):
        return max(_max_err(x, y) for x, y in zip(a, b, strict=True))
    if not a.dtype.is_floating_point:
        return float((a != b).float().mean())  # fraction of differing integers
    d = (a.float() - b.float()).abs()
    return float("nan") if bool(d.isnan().any()) else float(d.max())


def _time_ms(fn: Callable[[], Any], cuda: bool) -> float:
    if cuda:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=100))
    fn()  # the interpreter: one warm-up, one timed run
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


# ---------------------------------------------------------------------------------------------- the cases
def _pair(op: str, shape: str, dt: torch.dtype, nbytes: int, tri: Callable[..., Any], ref: Callable[..., Any],
          *args: Any, compare: Callable[[Any], Any] = lambda out: out) -> Case:
    """A case timing ``tri(*args)`` against ``ref(*args)``; ``compare`` picks the outputs to diff."""

    def run_tri() -> Any:
        return tri(*args)

    def run_ref() -> Any:
        return ref(*args)

    def err() -> float:
        return _max_err(compare(run_tri()), compare(run_ref()))

    return Case(op, shape, dt, nbytes, run_tri, run_ref, err)


def _commit_fresh(fn: Callable[..., Any], logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor) -> Any:
    t, m = tokens.clone(), masked.clone()  # the step writes in place: start every call from the same state
    s, commit = fn(logits, t, m, CommitRule(0.9, 1, 0))
    return s, commit.float(), t


def commit_cases(dev: str, dt: torch.dtype, shapes: list[tuple[int, int, int]]) -> list[Case]:
    from edit_engine.kernels._triton_commit import commit_step_triton
    from edit_engine.kernels.commit import commit_step_ref

    out = []
    for b, c, v in shapes:
        logits = torch.randn(b, c, v, device=dev).mul_(3).to(dt)
        tokens = torch.zeros(b, c, dtype=torch.long, device=dev)
        masked = torch.ones(b, c, dtype=torch.bool, device=dev)
        # logits once; per slot: token in/out (16), mask in/out (2), score (4), committed (1), two intermediates
        nbytes = b * c * v * _size(dt) + b * c * (16 + 2 + 4 + 1 + 12 * 2)
        out.append(_pair("commit_step", f"B={b} C={c} V={v}", dt, nbytes,
                         partial(_commit_fresh, commit_step_triton), partial(_commit_fresh, commit_step_ref),
                         logits, tokens, masked))
    return out


def _head_plain(h: torch.Tensor, w: torch.Tensor) -> Any:
    from edit_engine.kernels._triton_commit import token_stats_triton

    logits = F.linear(h, w)
    logits[..., 1] = float("-inf")
    return token_stats_triton(logits)


def head_cases(dev: str, dt: torch.dtype, shapes: list[tuple[int, int, int]]) -> list[Case]:
    from edit_engine.kernels._triton_head import head_token_stats_triton
    from edit_engine.kernels.head import head_token_stats_ref
    from edit_engine.kernels.rules import HeadBans

    fused = partial(head_token_stats_triton, bans=HeadBans(ban_id=1))
    twin = partial(head_token_stats_ref, bans=HeadBans(ban_id=1))
    out = []
    for m, d, v in shapes:
        h = torch.randn(1, m, d, device=dev).to(dt)
        w = (torch.randn(v, d, device=dev) / math.sqrt(d) * 3).to(dt)
        nbytes = v * d * _size(dt) + m * d * _size(dt) + m * 12
        shape = f"M={m} D={d} V={v}"

        def scores(out: Any) -> Any:
            return out[1]  # tokens may differ at bf16 near-ties (the twin rounds the logits)

        out.append(_pair("head", shape + " fused", dt, nbytes, fused, twin, h, w, compare=scores))
        # the plain path also writes the logits and reads them back
        out.append(_pair("head", shape + " matmul+stats", dt, nbytes + 2 * m * v * _size(dt), _head_plain, twin,
                         h, w, compare=scores))
    return out


def rms_cases(dev: str, dt: torch.dtype, shapes: list[tuple[int, int]]) -> list[Case]:
    from edit_engine.kernels._triton_rmsnorm import add_rms_norm_triton
    from edit_engine.kernels.rmsnorm import add_rms_norm_ref

    out = []
    for rows, d in shapes:
        x = torch.randn(rows, d, device=dev).to(dt)
        delta = torch.randn(rows, d, device=dev).to(dt)
        w = torch.randn(d, device=dev).to(dt)
        nbytes = (4 * rows * d + d) * _size(dt)  # read x, delta, weight; write normed, residual
        out.append(_pair("add_rms_norm", f"rows={rows} D={d}", dt, nbytes, add_rms_norm_triton, add_rms_norm_ref,
                         x, delta, w, 1e-5))
    return out


def rotary_cases(dev: str, dt: torch.dtype, shapes: list[tuple[int, int, int, int]]) -> list[Case]:
    from edit_engine.kernels._triton_rotary import apply_rotary_triton
    from edit_engine.kernels.rotary import apply_rotary_ref, rotary_tables

    out = []
    for b, t, h, hd in shapes:
        qkv = torch.randn(b, t, 3, h, hd, device=dev).to(dt)
        q, k, _ = qkv.unbind(2)  # strided, as in the model
        pos = torch.arange(t, device=dev).expand(b, t)
        cos, sin = (x.to(dt) for x in rotary_tables(pos, hd, 10000.0))
        nbytes = (4 * b * t * h * hd + 2 * b * t * hd // 2) * _size(dt)  # read+write q and k; cos, sin
        out.append(_pair("rotary", f"B={b} T={t} H={h} hd={hd}", dt, nbytes, apply_rotary_triton,
                         apply_rotary_ref, q, k, cos, sin))
    return out


def attention_cases(dev: str, dt: torch.dtype, shapes: list[tuple[int, int, int, int, int, int]]) -> list[Case]:
    from edit_engine.kernels._triton_attention import canvas_attention_triton
    from edit_engine.kernels.attention import canvas_attention_ref

    out = []
    for b, h, hk, c, ctx, hd in shapes:
        L = ctx + c
        q = torch.randn(b, h, c, hd, device=dev).to(dt)
        k = torch.randn(b, hk, L, hd, device=dev).to(dt)
        v = torch.randn(b, hk, L, hd, device=dev).to(dt)
        valid = torch.ones(b, L, dtype=torch.bool, device=dev)
        c_blocks = -(-c // 64)
        # K and V once per 64-query block, q and the output once, the key mask
        nbytes = (2 * b * hk * L * hd * c_blocks + 2 * b * h * c * hd) * _size(dt) + b * L
        out.append(_pair("attention", f"B={b} H={h} Hk={hk} C={c} ctx={ctx} hd={hd}", dt, nbytes,
                         canvas_attention_triton, canvas_attention_ref, q, k, v, valid))
    return out


def all_cases(smoke: bool) -> list[Case]:
    if smoke:
        dev, dt = "cpu", torch.float32
        return (commit_cases(dev, dt, [(1, 7, 333)]) + head_cases(dev, dt, [(7, 24, 333)])
                + rms_cases(dev, dt, [(7, 48)]) + rotary_cases(dev, dt, [(1, 7, 2, 16)])
                + attention_cases(dev, dt, [(1, 2, 1, 7, 40, 16)]))
    dev, dt = "cuda", torch.bfloat16
    return (
        # canvas of 64 / 256 slots; the default vocabulary, Qwen2's
        commit_cases(dev, dt, [(1, 64, 8192), (1, 256, 8192), (4, 256, 32768), (1, 256, 151936)])
        # crossover of fused vs plain head: vocabulary 8K .. 152K at width 768 / 2048
        + head_cases(dev, dt, [(64, 768, 8192), (256, 768, 16384), (256, 768, 32768), (64, 2048, 151936)])
        # canvas rows per pass, and a context encode's rows
        + rms_cases(dev, dt, [(64, 768), (256, 2048), (8192, 2048)])
        + rotary_cases(dev, dt, [(1, 64, 12, 64), (1, 4096, 16, 128)])
        # one canvas of 64 against growing cached contexts; grouped heads (Qwen2-1.5B shape)
        + attention_cases(dev, dt, [(1, 12, 12, 64, 1024, 64), (1, 12, 12, 64, 8192, 64),
                                    (1, 12, 12, 256, 8192, 64), (1, 12, 2, 64, 32768, 128),
                                    (4, 12, 12, 64, 4096, 64)])
    )


def measure(case: Case, cuda: bool, peak_gbps: float) -> Row:
    err = case.err()
    t_ms = _time_ms(case.triton, cuda)
    r_ms = _time_ms(case.torch, cuda)
    floor = case.bytes / (peak_gbps * 1e9) * 1e3
    return Row(case.op, case.shape, str(case.dtype).removeprefix("torch."), case.bytes, t_ms, r_ms,
               case.bytes / (t_ms * 1e-3) / 1e9, floor, floor / t_ms, r_ms / t_ms, err)


def table(rows: list[Row]) -> str:
    head = (f"{'op':<13} {'shape':<40} {'triton ms':>10} {'torch ms':>10} {'GB/s':>8} {'floor ms':>9} "
            f"{'of peak':>8} {'speed-up':>9} {'max err':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.op:<13} {r.shape:<40} {r.triton_ms:>10.4f} {r.torch_ms:>10.4f} {r.gbps:>8.1f} "
                     f"{r.floor_ms:>9.4f} {r.of_peak:>7.0%} {r.speedup:>8.2f}x {r.max_err:>9.2e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(prog="python -m edit_engine.kernels.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="kernels-bench.json", help="where to write the rows as JSON")
    ap.add_argument("--peak-gbps", type=float, default=H200_PEAK_GBPS, help="memory bandwidth for the floor")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under the Triton interpreter")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda and not args.smoke:
        ap.error("no CUDA device; use --smoke to check the script on the CPU (timings then mean nothing)")
    if not cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel modules import triton
    import triton

    torch.manual_seed(0)
    rows = [measure(c, cuda, args.peak_gbps) for c in all_cases(args.smoke)]
    device = torch.cuda.get_device_name() if cuda else f"CPU ({platform.processor() or 'unknown'}), interpreter"
    print(f"device: {device}; floor = bytes / {args.peak_gbps:.0f} GB/s")
    print(table(rows))
    meta = {"device": device, "peak_gbps": args.peak_gbps, "smoke": args.smoke, "torch": torch.__version__,
            "triton": triton.__version__, "rows": [asdict(r) for r in rows]}
    with open(args.json, "w") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
