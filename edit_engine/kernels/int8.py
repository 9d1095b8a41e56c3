"""Int8 linear layers for serving on a CPU: weights quantized once per output channel, activations per row.

``y = x @ W.T`` becomes ``(qx @ qW.T) * sx * sw`` with ``qx = round(x / sx)``, ``sx = max|x_row| / 127`` (one
scale per token, computed on the fly) and ``qW = round(W / sw)``, ``sw = max|W_row| / qmax`` (one scale per
output channel, computed once by ``quantize_weight``). Symmetric, no zero points.

Why: a denoising pass over a cached context multiplies 8-32 canvas rows by every weight matrix, which on a CPU
is bound by moving the weights, not by arithmetic; int8 weights are a quarter of float32's bytes, and the int8
GEMM behind ``torch._int_mm`` (oneDNN) is several times faster than float32's at the head's shape.
kernels/BENCHMARKS.md, "Int8 linear layers on the CPU", has the measurements.

``qmax`` is 127 where the CPU's int8 GEMM sums that range exactly (VNNI) and 64 where it does not
(``weight_qmax``: without VNNI, oneDNN saturates). The integer products are then exact (int32 accumulation), so
the fast path and the twin agree bit for bit: the twin multiplies the same integers in float64 and applies the
same scaling. ``int8_linear`` runs ``torch._int_mm`` where the layer's range allows it (``Int8Linear.gemm``) on
CPU tensors with 2 to ``MAX_GEMM_K`` input features (torch 2.13's CPU ``_int_mm`` is wrong for one), and the
twin otherwise.
"""

from __future__ import annotations

import functools

import torch

from edit_engine.kernels.cpu import VNNI_FLAGS, present

QMAX = 127  # activations, and weights where the int8 GEMM is exact over the full range
QMAX_SAFE = 64  # weights elsewhere (``weight_qmax``)
MAX_GEMM_K = (2**31 - 1) // (QMAX * QMAX)  # 133,144 input features: int32 sums cannot overflow below it


def _gemm_exact(wmax: int) -> bool:
    """Whether ``torch._int_mm`` on this CPU returns exact sums for activations in [-127, 127] and weights in
    [-wmax, wmax]: worst-case operands (every product at the bound) at a few shapes, against int64 sums."""
    g = torch.Generator().manual_seed(0)
    for m, k, n in ((1, 256, 64), (8, 704, 48), (40, 256, 96)):
        a = torch.randint(-QMAX, QMAX + 1, (m, k), dtype=torch.int8, generator=g)
        b = torch.randint(-wmax, wmax + 1, (n, k), dtype=torch.int8, generator=g)
        full_a, full_b = torch.full((m, k), QMAX, dtype=torch.int8), torch.full((n, k), wmax, dtype=torch.int8)
        for x, w in ((a, b), (full_a, full_b), (-full_a, full_b), (full_a, -full_b)):
            try:
                got = torch._int_mm(x, w.t())
            except RuntimeError:
                return False
            if not torch.equal(got.long(), x.long() @ w.long().t()):
                return False
    return True


@functools.lru_cache(maxsize=1)
def weight_qmax() -> int:
    """The int8 weight range this CPU's GEMM sums exactly: 127 with VNNI (AVX512-VNNI, AVX-VNNI, AMX), 64
    without it. oneDNN's int8 GEMM without VNNI adds pairs of u8 * s8 products in saturating int16
    (vpmaddubsw), so weights beyond 64 overflow: with ``ONEDNN_MAX_CPU_ISA=AVX2`` on this project's EPYC,
    full-range weights gave errors of 7-20% of the largest output. Checked once per process (``_gemm_exact``);
    0 when neither range is exact."""
    for wmax in (QMAX, QMAX_SAFE):
        if _gemm_exact(wmax):
            return wmax
    return 0


def cpu_int8_units() -> tuple[str, ...]:
    """The int8 dot-product units this CPU has (``cpu.VNNI_FLAGS`` among ``cpu.cpu_flags()``)."""
    return present(VNNI_FLAGS)


def int8_serving_reason() -> str:
    """Why ``--dtype int8`` is declined on this CPU, or "" where it serves. Int8 serving is kept where it is
    both exact (``weight_qmax`` > 0) and fast: only with an int8 dot-product unit (VNNI or AMX). Without one,
    oneDNN emulates the int8 GEMM and a typing session ran about 4x slower than float32 on an AVX2-only EPYC."""
    units = cpu_int8_units()
    if not units:
        return "this CPU has no int8 dot-product unit (AVX512-VNNI, AVX-VNNI or AMX), where int8 is slower than float32"
    if weight_qmax() == 0:
        return "this CPU's int8 GEMM sums no weight range exactly"
    return ""


def gemm_ok(qmax: int) -> bool:
    """Whether weights quantized to [-qmax, qmax] may go through this CPU's int8 GEMM (``weight_qmax``)."""
    return 0 < qmax <= weight_qmax()


def default_qmax() -> int:
    """The weight range ``quantize_weight`` uses by default: ``weight_qmax()``, else ``QMAX_SAFE``."""
    return weight_qmax() or QMAX_SAFE


def quantize_weight(weight: torch.Tensor, qmax: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """weight (N, K) float -> (qweight (N, K) int8 in [-qmax, qmax], scale (N,) float32), symmetric per output
    row. ``qmax`` None: ``default_qmax()``."""
    if qmax is None:
        qmax = default_qmax()
    if not 1 <= qmax <= QMAX:
        raise ValueError(f"qmax={qmax}; expected 1..{QMAX}")
    q, scale = quantize_rows(weight.detach(), qmax)
    return q.contiguous(), scale.squeeze(1).contiguous()


def quantize_rows(x: torch.Tensor, qmax: int = QMAX) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) float -> (qx (M, K) int8 in [-qmax, qmax], scale (M, 1) float32), symmetric per row; a zero
    row stays zero. Activations per token, and (``quantize_weight``) weights per output channel."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / qmax).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.round(xf / scale).clamp_(-qmax, qmax).to(torch.int8), scale


def _scaled(acc: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor, shape: torch.Size,
            dtype: torch.dtype) -> torch.Tensor:
    """acc (M, N) int32 or float32 holding the integer sums -> acc * sx * sw shaped (*shape[:-1], N)."""
    return torch.mul(acc, sx).mul_(sw).reshape(*shape[:-1], sw.shape[0]).to(dtype)


def int8_linear_ref(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """PyTorch twin. x (..., K) float, qweight (N, K) int8, scale (N,) -> (..., N) in x.dtype."""
    qx, sx = quantize_rows(x.reshape(-1, x.shape[-1]))
    acc = qx.double() @ qweight.double().t()  # integers: exact
    return _scaled(acc.float(), sx, scale, x.shape, x.dtype)  # rounds to float32 as the int32 sums do


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, gemm: bool = False) -> torch.Tensor:
    """``int8_linear_ref``, through the int8 GEMM (``torch._int_mm``) when ``gemm`` is true (the caller has
    checked the weights' range with ``gemm_ok``; ``Int8Linear`` does once) and x is a CPU tensor; the twin
    otherwise. Decided from Python values only, so a compiled pass has no graph break here."""
    k = x.shape[-1]
    if not gemm or x.device.type != "cpu" or not 2 <= k <= MAX_GEMM_K:
        # K = 1: torch 2.13's CPU _int_mm returns wrong sums (tests/test_int8.py found it; every K >= 2 is exact)
        return int8_linear_ref(x, qweight, scale)
    qx, sx = quantize_rows(x.reshape(-1, k))
    acc = torch._int_mm(qx, qweight.t())  # (M, N) int32
    return _scaled(acc, sx, scale, x.shape, x.dtype)


class Int8Linear(torch.nn.Module):
    """A bias-free ``nn.Linear`` for inference with its weight held as int8 (``quantize_weight``). Whether it
    may use the int8 GEMM (``gemm_ok`` for its range) is decided here, once."""

    def __init__(self, weight: torch.Tensor, qmax: int | None = None) -> None:
        super().__init__()
        self.qmax = default_qmax() if qmax is None else qmax
        self.gemm = gemm_ok(self.qmax)
        q, s = quantize_weight(weight, self.qmax)
        self.qweight: torch.Tensor
        self.scale: torch.Tensor
        self.register_buffer("qweight", q)
        self.register_buffer("scale", s)

    @property
    def in_features(self) -> int:
        return int(self.qweight.shape[1])

    @property
    def out_features(self) -> int:
        return int(self.qweight.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_linear(x, self.qweight, self.scale, self.gemm)

    def extra_repr(self) -> str:
        path = "int8 GEMM" if self.gemm else "twin"
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 +-{self.qmax}, {path}"
