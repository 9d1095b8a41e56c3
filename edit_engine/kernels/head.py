"""The tied linear head fused with the commit statistics: (token, score) per canvas slot without the logits.

``head_token_stats(h, weight, bans)`` returns what ``token_stats_ref(h @ weight.T + bias)`` returns (the chosen
token and its probability) after the sampler's bans, a ``HeadBans`` (``ban_id``: a token no row may choose, the
mask id; ``pad_id`` with ``pad_ban`` (B, C) bool: rows where the pad token is forbidden; ``bias``: None, or a
(V,) or (B, V) logit bias, the sampler's novel-name penalty). Greedy only: a sampled choice (temperature > 0)
needs every logit and keeps the plain path.

Two implementations on CUDA, chosen by vocabulary size (``FUSED_HEAD_MIN_VOCAB``): the plain cuBLAS matmul
followed by the Triton statistics kernel, or the fused Triton kernel that never writes the B*C*V logits. The
fused one pays off only when the logits traffic (2 * B*C*V*sizeof) outweighs its slower matmul; where that is
is a measurement (``python -m edit_engine.kernels.bench``, section ``head``; kernels/BENCHMARKS.md).

How the sampler uses it (greedy passes)::

    h = model.canvas_hidden(canvas, cache)                                # (B, C, D), final norm applied
    real_after = ...                                                      # as in sampler._constrain_pads
    idx, s = kernels.head_token_stats(h, model.embed.weight, kernels.HeadBans(mask_id, pad_id, real_after))
    kernels.commit_from_stats(idx, s, canvas, masked, kernels.CommitRule(cfg.threshold, cfg.min_commit,
                                                                         cfg.max_commit, cfg.spread))
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from edit_engine.kernels.commit import token_stats_ref
from edit_engine.kernels.dispatch import use_triton
from edit_engine.kernels.rules import NO_BANS, HeadBans

# Vocabulary size from which the fused kernel replaces matmul + statistics on CUDA. The one GPU run so far
# (kernels/BENCHMARKS.md, taken beside a training) did not settle the crossover (fused won at 16K and 152K, tied
# at 32K, lost at 8K): this keeps every current preset (V <= 16384) on the plain path until an idle-GPU run.
FUSED_HEAD_MIN_VOCAB = 32768




def head_token_stats_ref(
    h: torch.Tensor, weight: torch.Tensor, bans: HeadBans = NO_BANS
) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch twin. h (B, C, D), weight (V, D) -> (token (B, C) int64, its probability (B, C) fp32)."""
    return token_stats_ref(bans.apply(F.linear(h, weight)))


def head_token_stats(
    h: torch.Tensor, weight: torch.Tensor, bans: HeadBans = NO_BANS, fused: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dispatcher; ``fused`` None picks by ``FUSED_HEAD_MIN_VOCAB``, True/False force the Triton path's variant."""
    if not use_triton(h, weight):
        return head_token_stats_ref(h, weight, bans)
    if fused is None:
        fused = weight.shape[0] >= FUSED_HEAD_MIN_VOCAB
    if fused:
        from edit_engine.kernels._triton_head import head_token_stats_triton

        return head_token_stats_triton(h, weight, bans)
    from edit_engine.kernels._triton_commit import token_stats_triton

    return token_stats_triton(bans.apply(F.linear(h, weight)))
