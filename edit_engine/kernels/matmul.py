"""The bias-free projection ``x @ weight.T`` (every block's projections and the tied head).

On the CPU in float32, a pass over a canvas of a few rows reads every weight once and does little arithmetic with
it: it is bound by how fast the weights stream from memory. ``F.linear`` hands the weight to the BLAS as the
transposed right operand, which it packs before use; computing the transpose of the product,
``weight @ x.T``, streams the weight as the left operand instead. Measured on a 2-core AVX2 EPYC, the packaged
model's canvas pass (projections, attention, head) at two threads: 0.55-0.91x the time with ``F.linear`` for
canvases of 4 to 32 slots; at one thread 0.69-0.83x up to 8 slots, even from 16 on. A context of 64 rows or
more encodes faster with ``F.linear`` (1.1-1.4x), hence ``MAX_ROWS`` (docs/results.md). ``linear_ref``
(``F.linear``) is the twin and the path everywhere else (GPUs, other dtypes, autograd, many rows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MAX_ROWS = 32  # the streamed form for products of up to this many rows (a canvas pass, a few new context tokens)


def linear_ref(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """PyTorch twin: x (..., K), weight (N, K) -> (..., N)."""
    return F.linear(x, weight)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (..., K), weight (N, K) -> (..., N), contiguous. The streamed form (module doc) for float32 on the CPU
    without autograd and at most ``MAX_ROWS`` rows; ``linear_ref`` otherwise."""
    rows = x.numel() // max(1, x.shape[-1])
    if (x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32 or rows > MAX_ROWS
            or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        return linear_ref(x, weight)
    flat = x.reshape(rows, x.shape[-1]).contiguous()  # row-major: flat.t() is the BLAS's transposed operand
    return torch.mm(weight, flat.t()).t().contiguous().view(*x.shape[:-1], weight.shape[0])
