"""The fused commit step of a denoising pass.

From the canvas logits, for every masked position: the chosen token (arg-max, or a token the caller sampled)
and its probability, the position's score (the confidence, in [0, 1], larger = surer). Then the threshold
commit of Fast-dLLM (Wu et al. 2025, "Fast-dLLM", Sec. 3.2): commit every masked position whose score clears
``threshold``; at least ``min_commit`` per row (the best ones) and at most ``max_commit`` (0 = no ceiling): a
``CommitRule``. Tokens and mask are written in place.

Shapes: logits (B, C, V) any float dtype; tokens (B, C) int64; masked (B, C) bool; choice (B, C) int64 or None.
Returns (score (B, C) fp32 with -1 at unmasked positions, committed (B, C) bool).
No host synchronisation: everything stays a tensor.
"""

from __future__ import annotations

import torch

from edit_engine.kernels.dispatch import use_triton
from edit_engine.kernels.rules import CommitRule, commit_step_of


def token_stats_ref(logits: torch.Tensor, choice: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen token (B, C) int64, its probability (B, C) fp32) of every position, masked or not."""
    lf = logits if logits.dtype == torch.float64 else logits.float()  # fp32 at least; fp64 stays (tests)
    lse = torch.logsumexp(lf, dim=-1)  # (B, C)
    if choice is None:
        top, idx = lf.max(dim=-1)
    else:
        idx = choice
        top = lf.gather(-1, choice.unsqueeze(-1)).squeeze(-1)
    return idx, torch.exp(top - lse)


def _rank(s: torch.Tensor) -> torch.Tensor:
    """Rank of each position in its row by score, best first (ties: lower index first)."""
    order = torch.sort(s, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(s.shape[-1], device=s.device).expand_as(order))
    return rank


def spread_eligible(s: torch.Tensor, masked: torch.Tensor, radius: int = 1) -> torch.Tensor:
    """Masked slots whose score is the highest among the masked slots within ``radius`` of them (ties: the
    leftmost): the slots a spread floor may take. No two of them are within ``radius`` of each other, and the
    best masked slot of a row always is one. Scores are probabilities in [0, 1]; unmasked slots count as -1, so
    they never block a neighbour."""
    s = s.masked_fill(~masked, -1.0)
    ok = masked.clone()
    for d in range(1, min(radius, s.shape[-1] - 1) + 1):
        neg = torch.full_like(s[..., :d], -1.0)
        left = torch.cat([neg, s[..., :-d]], -1)
        right = torch.cat([s[..., d:], neg], -1)
        ok &= (s > left) & (s >= right)
    return ok


def commit_mask_ref(
    s: torch.Tensor, masked: torch.Tensor, rule: CommitRule
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which masked positions to commit. Returns (score with -1 off the mask, committed bool).

    Every masked slot scoring at least ``threshold`` commits, and so do the ``min_commit`` best (the floor), at
    most ``max_commit`` (the best; 0 = no ceiling). With ``spread`` = R > 0 the floor takes the best of the
    ``spread_eligible(s, masked, R)`` slots only: never two slots within R of each other whose tokens were chosen
    independently in one pass, where a small model's guesses disagree most (a repeated word, a doubled
    bracket). ``True`` is R = 1. Once no more than ``min_commit`` slots of a row are masked, that row's floor
    takes them all, as the plain floor would: separating the last few picks cost the 8-slot keystroke canvas
    3.5 passes per fill instead of 2.8 and measured no better on held-out code (docs/results-archive-2026-12-05.md, 2026-11-30, "The
    endgame rule"). The ceiling keeps its meaning, the ``max_commit`` best masked slots overall, so with
    ``spread`` a floor pick ranked below them is dropped (the best slot always commits)."""
    min_commit, max_commit = rule.min_commit, rule.max_commit
    s = torch.where(masked, s, torch.full_like(s, -1.0))
    rank = _rank(s)
    if rule.spread:
        ok = spread_eligible(s, masked, int(rule.spread))
        spread_floor = ok & (_rank(torch.where(ok, s, torch.full_like(s, -1.0))) < min_commit)
        # The endgame: once no more than ``min_commit`` slots are masked, the floor takes them all (``few``).
        few = masked.sum(-1, keepdim=True) <= min_commit
        floor = torch.where(few, rank < min_commit, spread_floor)
    else:
        floor = rank < min_commit
    commit = masked & ((s >= rule.threshold) | floor)
    if max_commit > 0:
        commit &= rank < max_commit
    return s, commit


def commit_from_stats_ref(
    idx: torch.Tensor, s: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, rule: CommitRule
) -> tuple[torch.Tensor, torch.Tensor]:
    """The second half of the commit step, from (token, score) (B, C): decides by ``rule``, then writes the
    committed tokens into ``tokens`` and clears their slots of ``masked``, in place."""
    s, commit = commit_mask_ref(s, masked, rule)
    tokens.copy_(torch.where(commit, idx, tokens))
    masked.copy_(masked & ~commit)
    return s, commit


def commit_from_stats(
    idx: torch.Tensor, s: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, rule: CommitRule
) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(s):
        from edit_engine.kernels._triton_commit import commit_from_stats_triton

        return commit_from_stats_triton(idx, s, tokens, masked, rule)
    return commit_from_stats_ref(idx, s, tokens, masked, rule)


# PyTorch twin of the fused commit step (the Triton one: ``_triton_commit.commit_step_triton``).
commit_step_ref = commit_step_of(token_stats_ref, commit_from_stats_ref)


def commit_step(
    logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, rule: CommitRule,
    choice: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(logits):
        from edit_engine.kernels._triton_commit import commit_step_triton

        return commit_step_triton(logits, tokens, masked, rule, choice)
    return commit_step_ref(logits, tokens, masked, rule, choice)
