"""RMSNorm, optionally fused with the residual add that precedes it.

``add_rms_norm(x, delta, weight)`` returns ``(rms_norm(x + delta) * weight, x + delta)``: the pre-norm block's
"residual += sublayer output; normalise for the next sublayer" in one pass over the activations.
"""

from __future__ import annotations

import torch

from edit_engine.kernels.dispatch import use_triton


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """PyTorch twin. x: (..., D), weight: (D,) -> (..., D) in x.dtype, computed in fp32."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


def add_rms_norm_ref(
    x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch twin of the fused residual add + RMSNorm. Returns (normed, new_residual)."""
    h = x + delta
    return rms_norm_ref(h, weight, eps), h


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if use_triton(x, weight):
        from edit_engine.kernels._triton_rmsnorm import rms_norm_triton

        return rms_norm_triton(x, weight, eps)
    return rms_norm_ref(x, weight, eps)


def add_rms_norm(
    x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(x, delta, weight):
        from edit_engine.kernels._triton_rmsnorm import add_rms_norm_triton

        return add_rms_norm_triton(x, delta, weight, eps)
    return add_rms_norm_ref(x, delta, weight, eps)
