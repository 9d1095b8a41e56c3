"""Rotary position embedding applied to q and k together (GPT-NeoX / LLaMA "rotate half" layout).

Shapes: q (B, T, Hq, hd), k (B, T, Hk, hd), cos and sin (B, T, hd/2). The first half of each head is rotated
with the second half: (x1, x2) -> (x1*cos - x2*sin, x2*cos + x1*sin). Same convention as Qwen2 and LLaMA
checkpoints, so the open models reuse it.
"""

from __future__ import annotations

import torch

from .dispatch import use_triton


def rotary_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (*positions.shape, head_dim/2), fp32."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    ang = positions.to(torch.float32).unsqueeze(-1) * inv
    return torch.cos(ang), torch.sin(ang)


def _rotate_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)  # (B, T, 1, hd/2)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


def apply_rotary_ref(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch twin: returns new (q, k) with rotary applied."""
    return _rotate_ref(q, cos, sin), _rotate_ref(k, cos, sin)


def apply_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(q, k, cos, sin):
        from ._triton_rotary import apply_rotary_triton

        return apply_rotary_triton(q, k, cos, sin)
    return apply_rotary_ref(q, k, cos, sin)
