"""The values the kernels' twins, dispatchers and Triton versions share: the commit rule, the head's bans, and
how a backend's two halves make its fused commit step. A module of its own so that the Triton modules and the
dispatchers (which import those lazily) both import it, and neither imports the other at import time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CommitRule:
    """Which masked slots a pass commits (``commit_mask_ref``): every one scoring at least ``threshold``, the
    ``min_commit`` best (the floor), at most the ``max_commit`` best (0 = no ceiling); ``spread`` = R > 0 keeps
    the floor's own picks more than R apart."""

    threshold: float
    min_commit: int = 1
    max_commit: int = 0
    spread: int = 0


StatsOp = Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]]
CommitOp = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, CommitRule],
                    tuple[torch.Tensor, torch.Tensor]]
CommitStepOp = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def commit_step_of(stats: StatsOp, decide: CommitOp) -> CommitStepOp:
    """The fused commit step of one backend, from its two halves: ``stats`` (logits, choice) -> (token, score)
    and ``decide`` (token, score, tokens, masked, rule) -> (score, committed), writing in place.

    ``step(logits, tokens, masked, rule, choice=None)``: logits (B, C, V), tokens (B, C) int64 and masked (B, C)
    bool (written in place), rule a ``CommitRule``, choice (B, C) int64 or None (arg-max). Returns (score (B, C)
    fp32 with -1 at unmasked positions, committed (B, C) bool)."""

    def step(logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, rule: CommitRule,
             choice: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        idx, s = stats(logits, choice)
        return decide(idx, s, tokens, masked, rule)

    return step


def add_logit_bias(logits: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``logits`` (B, C, V) with a (V,) or (B, V) logit ``bias`` added to every slot, in place (the sampler's
    novel-name penalty); as it is when ``bias`` is None."""
    if bias is not None:
        b = bias.to(logits.device, logits.dtype)
        logits += b if b.dim() == 1 else b.unsqueeze(-2)
    return logits


@dataclass(frozen=True, eq=False)
class HeadBans:
    """What the sampler changes in the head's logits before the statistics: ``ban_id``, a token no slot may
    choose (the mask id); ``pad_id`` with ``pad_ban`` (B, C) bool, the slots where the pad token is forbidden;
    ``bias``, None or a (V,) or (B, V) logit bias, added first."""

    ban_id: int | None = None
    pad_id: int | None = None
    pad_ban: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (B, C, V) with the bias added and the bans applied, in place."""
        logits = add_logit_bias(logits, self.bias)
        if self.ban_id is not None:
            logits[..., self.ban_id] = float("-inf")
        if self.pad_ban is not None:
            if self.pad_id is None:
                raise ValueError("pad_ban needs pad_id")
            logits[..., self.pad_id].masked_fill_(self.pad_ban, float("-inf"))
        return logits


NO_BANS = HeadBans()
