"""Fast-dLLM-style approximate key/value caching for full-attention diffusion models (Dream, LLaDA, ...).

In these models every token attends to every other, so the context's keys and values *do* depend on the canvas
and the exact cache of our own model (``edit_engine.model.network``) does not apply. Fast-dLLM (Wu et al. 2025, Sec. 3.1,
"Key-Value Cache for Block-Wise Decoding") observes that between adjacent denoising steps the context's K/V
barely change, so it runs one full forward pass, keeps the K/V it produced, and for the next few passes
computes only the rows being decoded against those stale K/V:

- ``prefix`` (their *PrefixCache*): the prefix's K/V are reused; canvas and suffix rows are recomputed.
- ``dual`` (their *DualCache*): prefix and suffix K/V are both reused; only the canvas rows are recomputed.
- ``none``: every pass is a full pass over [prefix | canvas | suffix]: exact, the slowest.

Refresh: a pass is *full* (recomputes every row and rewrites the whole cache; its logits are used like any other
pass's) on the first pass, whenever the canvas changes size (the sampler doubles it: a block boundary, and the
suffix moves to new positions), and every ``refresh_every`` passes (Fast-dLLM refreshes once per block).
``refresh_every=1`` makes every pass full, which is exactly ``none``.

Counting: the sampler's ``nfe`` counts every call of ``canvas_logits``, full or cached alike, so
``nfe = stats.full_passes + stats.cached_passes``. A full pass costs about (P + C + S) / C cached passes in
compute (P, C, S = prefix, canvas, suffix tokens); ``stats.rows`` sums the query rows actually computed, the
honest cost measure to compare modes by.

Layout of one cache row (left-padded prefix, canvas, right-padded suffix):
``[pad..prefix (Pm) | canvas (C) | suffix..pad (Sm)]`` with rotary positions 0..P-1, P..P+C-1, P+C.. per row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

CACHE_MODES = ("none", "prefix", "dual")


@dataclass(frozen=True)
class CachePolicy:
    """How the approximate cache is used. Environment: ``EDIT_ENGINE_HF_CACHE``, ``EDIT_ENGINE_HF_REFRESH``."""

    mode: str = "dual"  # none | prefix | dual
    refresh_every: int = 4  # a full pass every this many passes (1 = always = exact; 0 = only on canvas growth)

    def __post_init__(self) -> None:
        if self.mode not in CACHE_MODES:
            raise ValueError(f"cache_mode={self.mode!r}; expected one of {CACHE_MODES}")
        if self.refresh_every < 0:
            raise ValueError("refresh_every must be >= 0")

    @classmethod
    def from_env(cls) -> CachePolicy:
        mode = os.environ.get("EDIT_ENGINE_HF_CACHE", cls.mode).strip().lower()
        refresh = int(os.environ.get("EDIT_ENGINE_HF_REFRESH", str(cls.refresh_every)))
        return cls(mode, refresh)


@dataclass
class CacheStats:
    full_passes: int = 0  # passes that recomputed every row (and refreshed the cache)
    cached_passes: int = 0  # passes that recomputed only the window
    rows: int = 0  # query rows computed, summed over all passes

    @property
    def nfe(self) -> int:
        return self.full_passes + self.cached_passes


class ApproxCache:
    """Context tokens, K/V buffers and the refresh state of one request (batch of B rows).

    k[i], v[i]: (B, Hk, Pm + capacity + Sm, hd); columns [0, length) are in use for the current canvas width.
    ``batch`` and ``capacity`` are what the sampler reads.
    """

    def __init__(self, prefixes: list[list[int]], suffixes: list[list[int]], capacity: int, policy: CachePolicy,
                 n_layers: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                 shift: bool, at_least: tuple[int, int] = (0, 0)) -> None:
        if len(prefixes) != len(suffixes):
            raise ValueError("prefixes and suffixes differ in batch size")
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        bsz = len(prefixes)
        self.policy = policy
        self.shift = shift
        self.capacity = capacity
        self.pm = max(max((len(p) for p in prefixes), default=0), at_least[0])
        self.sm = max(max((len(s) for s in suffixes), default=0), at_least[1])
        total = self.pm + capacity + self.sm
        self.prefix_len = torch.tensor([len(p) for p in prefixes], dtype=torch.long, device=device)  # (B,)
        self.suffix_len = torch.tensor([len(s) for s in suffixes], dtype=torch.long, device=device)  # (B,)
        self.tokens = torch.zeros(bsz, total, dtype=torch.long)
        self._suffix = torch.zeros(bsz, self.sm, dtype=torch.long)
        for r, (p, s) in enumerate(zip(prefixes, suffixes, strict=True)):
            if p:
                self.tokens[r, self.pm - len(p) : self.pm] = torch.tensor(p)
            if s:
                self._suffix[r, : len(s)] = torch.tensor(s)
        self.tokens = self.tokens.to(device)
        self._suffix = self._suffix.to(device)
        self.k = [torch.zeros(bsz, n_kv_heads, total, head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros_like(t) for t in self.k]
        self.width = -1  # canvas slots of the current layout (-1: no pass yet)
        self.length = 0  # columns in use: pm + width + sm
        self.positions = torch.zeros(bsz, total, dtype=torch.long, device=device)
        self.key_valid = torch.zeros(bsz, total, dtype=torch.bool, device=device)
        self.logit_rows = torch.zeros(bsz, 0, dtype=torch.long, device=device)
        self.since_refresh = 0
        self.stats = CacheStats()

    @property
    def batch(self) -> int:
        return int(self.tokens.shape[0])

    def _layout(self, c: int) -> None:
        """Place the suffix after a canvas of ``c`` slots; recompute positions, key mask and logit rows."""
        pm, sm = self.pm, self.sm
        dev = self.tokens.device
        self.width, self.length = c, pm + c + sm
        self.tokens[:, pm + c : pm + c + sm] = self._suffix
        col = torch.arange(self.length, device=dev)  # (T,)
        p = self.prefix_len.unsqueeze(-1)  # (B, 1)
        s = self.suffix_len.unsqueeze(-1)
        in_p = (col < pm) & (col >= pm - p)  # (B, T)
        in_c = (col >= pm) & (col < pm + c)
        in_s = (col >= pm + c) & (col < pm + c + s)
        pos = torch.where(in_p, col - (pm - p), torch.zeros_like(col))
        pos = torch.where(in_c | in_s, p + col - pm, pos)  # canvas P.., suffix P+C.. (contiguous)
        self.positions[:, : self.length] = pos
        self.key_valid[:] = False
        self.key_valid[:, : self.length] = in_p | in_c | in_s
        slot = torch.arange(c, device=dev)  # (C,)
        rows = pm + slot.unsqueeze(0).expand(self.batch, c)  # (B, C)
        if self.shift:
            # Slot j reads the output at j-1 (the last prefix token for slot 0); a row with no prefix reads
            # slot 0 from itself, as Dream's shift does for position 0.
            rows = rows - ((slot > 0).unsqueeze(0) | (p > 0)).long()
        self.logit_rows = rows

    @property
    def window_start(self) -> int:
        """First column recomputed by a cached pass: the canvas, or the token before it for shifted models."""
        return self.pm - 1 if (self.shift and self.pm > 0) else self.pm

    def begin_pass(self, canvas: torch.Tensor) -> tuple[int, int, bool]:
        """Write the canvas (B, C) into the layout and decide this pass: (first row, end row, full pass?)."""
        c = int(canvas.shape[1])
        if c > self.capacity:
            raise ValueError(f"canvas of {c} slots exceeds the cache's capacity {self.capacity}")
        pol = self.policy
        full = (pol.mode == "none" or c != self.width
                or (pol.refresh_every > 0 and self.since_refresh >= pol.refresh_every))
        if c != self.width:
            self._layout(c)
        self.tokens[:, self.pm : self.pm + c] = canvas
        if full:
            lo, hi = 0, self.length
            self.since_refresh = 0
            self.stats.full_passes += 1
        else:
            lo = self.window_start
            hi = self.pm + c if pol.mode == "dual" else self.length
            self.stats.cached_passes += 1
        self.since_refresh += 1
        self.stats.rows += hi - lo
        return lo, hi, full
