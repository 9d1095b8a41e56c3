"""Triton RMSNorm and fused residual add + RMSNorm (twins: ``kernels.rmsnorm.rms_norm_ref``, ``add_rms_norm_ref``).

Each program normalises BLOCK_R rows of D features, a whole row in one block (D <= 16384); on the GPU one row
per program. ``add_rms_norm`` reads x, delta and the weight and writes the normed row and the new residual:
4 * D * sizeof(dtype) bytes per row, against the twin's separate add, square, mean, rsqrt, two multiplies and
casts (each a pass over the row). The sum x + delta is rounded to the input dtype before it is normalised,
exactly as the twin does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from edit_engine.kernels import _triton_commit


@triton.jit
def _rms_norm_kernel(
    x_ptr, d_ptr, w_ptr, y_ptr, h_ptr, n_rows, stride_x, stride_d, D, eps,
    HAS_DELTA: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    cm = cols < D
    ok = (rows < n_rows)[:, None] & cm[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0)
    out = rows[:, None] * D + cols[None, :]
    if HAS_DELTA:
        delta = tl.load(d_ptr + rows[:, None] * stride_d + cols[None, :], mask=ok, other=0.0)
        h = (x.to(tl.float32) + delta.to(tl.float32)).to(x.dtype)  # rounded like the twin's x + delta
        tl.store(h_ptr + out, h, mask=ok)
        x = h
    xf = x.to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=1) / D + eps)
    w = tl.load(w_ptr + cols, mask=cm, other=0.0).to(tl.float32)
    y = xf * r[:, None] * w[None, :]
    tl.store(y_ptr + out, y.to(y_ptr.dtype.element_ty), mask=ok)


def _rows(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1, t.shape[-1])
    return flat if flat.stride(-1) == 1 else flat.contiguous()


def _launch(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    D = x.shape[-1]
    if weight.shape != (D,):
        raise ValueError(f"weight of shape {tuple(weight.shape)} for rows of {D}")
    xr = _rows(x)
    dr = _rows(delta) if delta is not None else xr
    w = weight.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = torch.empty(x.shape, dtype=x.dtype, device=x.device) if delta is not None else y
    n = xr.shape[0]
    if n:
        block = triton.next_power_of_2(D)
        block_r = _triton_commit.rows_per_program(x, n, 1)
        _rms_norm_kernel[(triton.cdiv(n, block_r),)](
            xr, dr, w, y, h, n, xr.stride(0), dr.stride(0), D, float(eps),
            HAS_DELTA=delta is not None, BLOCK_R=block_r, BLOCK_D=block,
            num_warps=min(16, max(1, block // 256)),
        )
    return y, h


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x (..., D), weight (D,) -> (..., D) in x.dtype, statistics in fp32."""
    return _launch(x, None, weight, eps)[0]


def add_rms_norm_triton(
    x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + delta) * weight, x + delta), in one pass over the row."""
    if delta.shape != x.shape or delta.dtype != x.dtype:
        raise ValueError("x and delta must have the same shape and dtype")
    return _launch(x, delta, weight, eps)
