"""The tied linear head fused with the commit statistics: (token, score) per canvas slot without the logits.

``head_token_stats(h, weight, ban_id, pad_id, pad_ban, bias)`` returns what
``token_stats_ref(h @ weight.T + bias)`` returns (the chosen token and its probability) after the sampler's bans (``ban_id``: a token no row may
choose, the mask id; ``pad_id`` with ``pad_ban`` (B, C) bool: rows where the pad token is forbidden; ``bias``:
None, or a (V,) or (B, V) logit bias, the sampler's novel-name penalty). Greedy only: a
sampled choice (temperature > 0) needs every logit and keeps the plain path.

Two implementations on CUDA, chosen by vocabulary size (``FUSED_HEAD_MIN_VOCAB``): the plain cuBLAS matmul
followed by the Triton statistics kernel, or the fused Triton kernel that never writes the B*C*V logits. The
fused one pays off only when the logits traffic (2 * B*C*V*sizeof) outweighs its slower matmul; where that is
is a measurement (``python -m edit_engine.kernels.bench``, section ``head``; kernels/BENCHMARKS.md).

How the sampler uses it (greedy passes)::

    h = model.canvas_hidden(canvas, cache)                                # (B, C, D), final norm applied
    real_after = ...                                                      # as in sampler._constrain_pads
    idx, s = kernels.head_token_stats(h, model.embed.weight, mask_id, pad_id, real_after)
    kernels.commit_from_stats(idx, s, canvas, masked, cfg.threshold, cfg.min_commit, cfg.max_commit, cfg.spread)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .commit import commit_mask_ref, token_stats_ref
from .dispatch import use_triton

# Vocabulary size from which the fused kernel replaces matmul + statistics on CUDA. The one GPU run so far
# (kernels/BENCHMARKS.md, taken beside a training) did not settle the crossover (fused won at 16K and 152K, tied
# at 32K, lost at 8K): this keeps every current preset (V <= 16384) on the plain path until an idle-GPU run.
FUSED_HEAD_MIN_VOCAB = 32768


def _banned(logits: torch.Tensor, ban_id: int | None, pad_id: int | None,
            pad_ban: torch.Tensor | None) -> torch.Tensor:
    if ban_id is not None:
        logits[..., ban_id] = float("-inf")
    if pad_ban is not None:
        if pad_id is None:
            raise ValueError("pad_ban needs pad_id")
        logits[..., pad_id].masked_fill_(pad_ban, float("-inf"))
    return logits


def add_logit_bias(logits: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``logits`` (B, C, V) with a (V,) or (B, V) logit ``bias`` added to every slot, in place (the sampler's
    novel-name penalty); as it is when ``bias`` is None."""
    if bias is not None:
        b = bias.to(logits.device, logits.dtype)
        logits += b if b.dim() == 1 else b.unsqueeze(-2)
    return logits


def head_token_stats_ref(
    h: torch.Tensor,
    weight: torch.Tensor,
    ban_id: int | None = None,
    pad_id: int | None = None,
    pad_ban: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch twin. h (B, C, D), weight (V, D) -> (token (B, C) int64, its probability (B, C) fp32). ``bias``
    (V,) or (B, V): added to the logits before the bans."""
    return token_stats_ref(_banned(add_logit_bias(F.linear(h, weight), bias), ban_id, pad_id, pad_ban))


def head_token_stats(
    h: torch.Tensor,
    weight: torch.Tensor,
    ban_id: int | None = None,
    pad_id: int | None = None,
    pad_ban: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    fused: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dispatcher; ``fused`` None picks by ``FUSED_HEAD_MIN_VOCAB``, True/False force the Triton path's variant."""
    if not use_triton(h, weight):
        return head_token_stats_ref(h, weight, ban_id, pad_id, pad_ban, bias)
    if fused is None:
        fused = weight.shape[0] >= FUSED_HEAD_MIN_VOCAB
    if fused:
        from ._triton_head import head_token_stats_triton

        return head_token_stats_triton(h, weight, ban_id, pad_id, pad_ban, bias)
    from ._triton_commit import token_stats_triton

    return token_stats_triton(_banned(add_logit_bias(F.linear(h, weight), bias), ban_id, pad_id, pad_ban))


def commit_from_stats_ref(
    idx: torch.Tensor,
    s: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    threshold: float,
    min_commit: int = 1,
    max_commit: int = 0,
    spread: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The second half of ``commit_step_ref``, from (token, score) (B, C): writes tokens and mask in place."""
    s, commit = commit_mask_ref(s, masked, threshold, min_commit, max_commit, spread)
    tokens.copy_(torch.where(commit, idx, tokens))
    masked.copy_(masked & ~commit)
    return s, commit


def commit_from_stats(
    idx: torch.Tensor,
    s: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    threshold: float,
    min_commit: int = 1,
    max_commit: int = 0,
    spread: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(s):
        from ._triton_commit import commit_from_stats_triton

        return commit_from_stats_triton(idx, s, tokens, masked, threshold, min_commit, max_commit, spread)
    return commit_from_stats_ref(idx, s, tokens, masked, threshold, min_commit, max_commit, spread)
