"""The context cache and its incremental edits (batch of one): what a keystroke changes without a full encode.

``ContextCache`` holds every layer's keys and values of a context, with room for a canvas after them
(``DiffusionLM.encode_context`` makes one). ``edit`` keeps a prefix, appends tokens, and moves or replaces the
suffix in place; ``pending_and_canvas`` runs a deferred append together with the next canvas pass; ``track``
starts the bookkeeping that edits need (prefix length, the suffix's unrotated keys); ``rotate`` applies (or
undoes) rotary positions on stored keys. The network's layer stack (``DiffusionLM._run``) does the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from edit_engine import kernels


class DiffusionLM(Protocol):
    """What the edits use of ``network.DiffusionLM`` (not imported: the network imports this module)."""

    cfg: Any  # a ``network.ModelConfig``
    embed: nn.Embedding

    @property
    def device(self) -> torch.device: ...

    def _run(self, x: torch.Tensor, pos: torch.Tensor,
             attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor: ...


@dataclass
class ContextCache:
    """Keys and values of the context for every layer, with room for the canvas after them.

    k[i], v[i]: (B, H, L + C_max, hd), context rows [0, L) written once, canvas rows rewritten every pass.
    key_valid: (B, L + C_max) bool. canvas_start: (B,) int64, the rotary position of canvas slot 0 (= P).
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    key_valid: torch.Tensor
    canvas_start: torch.Tensor
    ctx_len: int
    capacity: int  # canvas slots allocated after the context
    # Kept by ``DiffusionLM.edit_context`` (batch of one), which may also leave spare rows after the canvas:
    prefix_len: int = -1  # prefix rows [0, prefix_len), suffix rows [prefix_len, ctx_len); -1: not tracked
    suffix_k: list[torch.Tensor] | None = None  # per layer (1, H, S, hd): the suffix keys before rotation
    # (keep, tokens): prefix rows [keep, keep + len(tokens)) not computed yet; the next canvas pass computes them
    # with the canvas (``DiffusionLM.edit_context(defer=True)``, ``canvas_hidden``).
    pending: tuple[int, list[int]] | None = None

    @property
    def batch(self) -> int:
        return int(self.key_valid.shape[0])

    def repeat(self, rows: int, capacity: int) -> ContextCache:
        """``rows`` copies of this batch-of-one context, with room for ``capacity`` canvas slots: many canvases
        scored against one context in one pass (copy proposals). The context rows are copied (a few MB at
        most); this cache is left as it was."""
        if self.batch != 1:
            raise ValueError("repeat takes a batch-of-one context")
        if self.pending is not None:
            raise ValueError("repeat needs every context row computed (a deferred append is pending)")
        L = self.ctx_len
        pad = torch.zeros(rows, self.k[0].shape[1], capacity, self.k[0].shape[3], device=self.k[0].device,
                          dtype=self.k[0].dtype)
        k = [torch.cat([t[:, :, :L].repeat(rows, 1, 1, 1), pad], 2) for t in self.k]
        v = [torch.cat([t[:, :, :L].repeat(rows, 1, 1, 1), pad], 2) for t in self.v]
        valid = torch.ones(rows, L + capacity, dtype=torch.bool, device=self.key_valid.device)
        valid[:, :L] = self.key_valid[:, :L]
        return ContextCache(k, v, valid, self.canvas_start.repeat(rows), L, capacity)

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers (keys, values, spare rows, unrotated suffix keys, the key mask)."""
        kv = sum(t.numel() * t.element_size() for t in (*self.k, *self.v, *(self.suffix_k or ())))
        return kv + self.key_valid.numel() * self.key_valid.element_size()


def edit(model: DiffusionLM, cache: ContextCache, keep: int, append: list[int], suffix: list[int] | None,
         capacity: int | None, defer: bool) -> torch.Tensor:
    """Edit a batch-of-one context cache in place: keep its first ``keep`` prefix tokens, append
    ``append`` after them, and either move the suffix behind the new prefix (``suffix=None``) or replace
    it with ``suffix`` (token ids, recomputed). ``capacity`` raises the canvas room. Returns the final
    hidden states of the appended tokens, (1, n, D): for a causal LM, the features that predict the next
    token. ``defer``: leave the appended rows pending (``ContextCache.pending``; returns (1, 0, D)): the
    next canvas pass computes them with the canvas, in one forward instead of two (what a keystroke's
    first pass waits for). A pending append left by an earlier edit is folded into this one.

    Exact, by the layout: a prefix key depends only on the prefix tokens up to it (causal), so rows
    [0, keep) stay valid whatever follows them, and the appended rows attend causally to the kept and
    appended keys as in a full ``encode_context`` (equal up to float summation order). The suffix sits
    at P + ``max_canvas`` (P = prefix length), so a new P moves it. A replaced suffix is recomputed at its
    new positions. A moved one keeps its values and re-rotates its keys, stored unrotated: the same
    function (attention inside the suffix depends only on relative positions) but not the same rounding, as
    rotary angles are fp32 (pos * freq; the ulp at 1,300 rad is 1.2e-4): from the second layer on its
    keys and values differ from a full encode by about 1e-5 relative. Measured with the packaged model
    (P = 1,000, S = 256, 3 tokens appended): canvas logits (magnitude 12) within 8e-6 of a full encode
    when moved and 6e-6 when recomputed, the same arg-max; moving costs a copy, recomputing a forward pass
    over the suffix (about a fifth of a full encode there). The engine moves an unchanged suffix.

    The canvas rows past ``ctx_len`` are scratch: every pass writes them before it reads them. The buffers
    grow with spare rows (amortised, for token-by-token decoding); the caller owns the cache exclusively.
    """
    if cache.batch != 1:
        raise ValueError(f"edit_context needs a batch of one, got {cache.batch}")
    track(model, cache)
    p_old, s_old = cache.prefix_len, cache.ctx_len - cache.prefix_len
    if not 0 <= keep <= p_old:
        raise ValueError(f"keep={keep} outside the cached prefix of {p_old} tokens")
    keep, append = _fold_pending(cache, keep, append)
    p_new = keep + len(append)
    s_new = s_old if suffix is None else len(suffix)
    cap = max(cache.capacity, capacity or 0)
    _reserve(cache, p_new + s_new + cap)
    if suffix is None and s_old and p_new != p_old:
        _move_suffix(model, cache, p_old, p_new, s_old)
    h = torch.zeros(1, 0, model.cfg.d_model, device=model.device, dtype=model.embed.weight.dtype)
    if append and defer:
        cache.pending = (keep, list(append))
    elif append:
        h = _append_prefix(model, cache, keep, append)
    if suffix is not None and suffix:
        _replace_suffix(model, cache, p_new, suffix)
    elif suffix is not None:
        cache.suffix_k = None
    cache.prefix_len, cache.ctx_len, cache.capacity = p_new, p_new + s_new, cap
    cache.canvas_start = torch.full((1,), p_new, dtype=torch.long, device=model.device)
    return h


def _move_suffix(model: DiffusionLM, cache: ContextCache, p_old: int, p_new: int, s_old: int) -> None:
    """The suffix moved behind a new prefix: values copied, keys re-rotated from the unrotated ones."""
    assert cache.suffix_k is not None
    pos = p_new + model.cfg.max_canvas + torch.arange(s_old, device=model.device).unsqueeze(0)  # (1, S)
    # Every layer's keys in one rotation, every layer's values in one copy (the rows may overlap).
    keys = rotate(model, torch.cat(cache.suffix_k), pos)
    values = torch.cat([v[:, :, p_old : p_old + s_old] for v in cache.v])
    for i in range(len(cache.k)):
        cache.v[i][:, :, p_new : p_new + s_old] = values[i : i + 1]
        cache.k[i][:, :, p_new : p_new + s_old] = keys[i : i + 1]


def _append_prefix(model: DiffusionLM, cache: ContextCache, keep: int, append: list[int]) -> torch.Tensor:
    """Compute prefix rows [keep, keep + n) causally against the kept ones; their final hidden states."""
    dev = model.device
    p_new = keep + len(append)
    x = model.embed(torch.tensor([append], device=dev))  # (1, n, D)
    pos = torch.arange(keep, p_new, device=dev).unsqueeze(0)  # (1, n)
    causal = torch.arange(p_new, device=dev).unsqueeze(0) <= pos.transpose(0, 1)  # (n, P_new)

    def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        cache.k[i][:, :, keep:p_new] = k
        cache.v[i][:, :, keep:p_new] = v
        return F.scaled_dot_product_attention(q, cache.k[i][:, :, :p_new], cache.v[i][:, :, :p_new],
                                              attn_mask=causal)

    return model._run(x, pos, attend)


def _replace_suffix(model: DiffusionLM, cache: ContextCache, p_new: int, suffix: list[int]) -> None:
    """A new suffix, recomputed at its positions behind the prefix (the suffix sees only itself)."""
    dev, s_new = model.device, len(suffix)
    x = model.embed(torch.tensor([suffix], device=dev))
    pos = p_new + model.cfg.max_canvas + torch.arange(s_new, device=dev).unsqueeze(0)
    raw: list[torch.Tensor] = []

    def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        cache.k[i][:, :, p_new : p_new + s_new] = k
        cache.v[i][:, :, p_new : p_new + s_new] = v
        raw.append(rotate(model, k, pos, inverse=True))
        return F.scaled_dot_product_attention(q, k, v)

    model._run(x, pos, attend)
    cache.suffix_k = raw


def track(model: DiffusionLM, cache: ContextCache) -> None:
    """Start tracking a cache made by ``encode_context``: its prefix length and unrotated suffix keys."""
    if cache.prefix_len >= 0:
        return
    if cache.batch != 1:
        raise ValueError(f"incremental edits need a batch of one, got {cache.batch}")
    p = int(cache.canvas_start[0])  # one host read, when a cache is first edited
    s = cache.ctx_len - p
    cache.prefix_len = p
    if s:
        pos = p + model.cfg.max_canvas + torch.arange(s, device=model.device).unsqueeze(0)
        # The inverse rotation with the very tables that rotated them (one rounding, no angle error).
        cache.suffix_k = [rotate(model, k[:, :, p : p + s], pos, inverse=True) for k in cache.k]


def rotate(model: DiffusionLM, k: torch.Tensor, pos: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotary on keys laid out (N, H, T, hd) at positions (1, T); ``inverse`` undoes it."""
    cos, sin = kernels.rotary_tables(pos, model.cfg.head_dim, model.cfg.rope_theta)  # (1, T, hd/2)
    if inverse:
        sin = -sin
    kt = k.transpose(1, 2)  # (1, T, H, hd)
    _, out = kernels.apply_rotary(kt, kt, cos.to(k.dtype), sin.to(k.dtype))
    return out.transpose(1, 2)


def pending_and_canvas(model: DiffusionLM, canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:
    """``canvas_hidden`` when prefix rows are pending: one forward over those rows and the canvas. A pending
    row attends causally to the prefix (as ``edit_context`` would have run it); a canvas row to every context
    row and the canvas (as ``canvas_hidden``): each row's arithmetic is what the two passes would do, in one
    pass's worth of per-op overhead. Returns the canvas rows' hidden states."""
    assert cache.pending is not None
    keep, toks = cache.pending
    n, c, L = len(toks), canvas.shape[1], cache.ctx_len
    dev = canvas.device
    x = model.embed(torch.cat([torch.tensor([toks], device=dev), canvas], 1))  # (1, n + C, D)
    pos = torch.cat([torch.arange(keep, keep + n, device=dev),
                     cache.canvas_start[0] + torch.arange(c, device=dev)]).unsqueeze(0)
    keys = torch.arange(L + c, device=dev)
    mask = torch.cat([keys.unsqueeze(0) <= pos[0, :n].unsqueeze(1),  # pending rows: causal in the prefix
                      cache.key_valid[:, : L + c].expand(c, -1)])  # canvas rows: every valid key
    mask = mask.view(1, 1, n + c, L + c)

    def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        cache.k[i][:, :, keep : keep + n] = k[:, :, :n]
        cache.v[i][:, :, keep : keep + n] = v[:, :, :n]
        cache.k[i][:, :, L : L + c] = k[:, :, n:]
        cache.v[i][:, :, L : L + c] = v[:, :, n:]
        return F.scaled_dot_product_attention(q, cache.k[i][:, :, : L + c], cache.v[i][:, :, : L + c],
                                              attn_mask=mask)

    h = model._run(x, pos, attend)
    cache.pending = None
    return h[:, n:]


def _fold_pending(cache: ContextCache, keep: int, append: list[int]) -> tuple[int, list[int]]:
    """An edit of a cache with a pending append: the rows to (re)compute, from where, so that the pending
    rows it keeps are computed too; clears ``pending``."""
    if cache.pending is None:
        return keep, append
    k0, toks0 = cache.pending
    cache.pending = None
    return (k0, toks0[: keep - k0] + list(append)) if keep > k0 else (keep, append)


def _reserve(cache: ContextCache, rows: int) -> None:
    """Grow a batch-of-one cache's buffers to hold ``rows`` rows, with spare rows for later growth."""
    if rows <= cache.key_valid.shape[1]:  # (a batch of one has no padding: every row is a valid key)
        return
    new = rows + max(64, rows // 4)  # spare rows: amortised growth for token-by-token decoding
    L = cache.ctx_len
    for buf in (cache.k, cache.v):
        for i, t in enumerate(buf):
            grown = torch.zeros(1, t.shape[1], new, t.shape[3], device=t.device, dtype=t.dtype)
            grown[:, :, :L] = t[:, :, :L]
            buf[i] = grown
    cache.key_valid = torch.ones(1, new, dtype=torch.bool, device=cache.key_valid.device)
