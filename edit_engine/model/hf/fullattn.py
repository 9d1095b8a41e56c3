"""Full-attention diffusion transformers (Qwen2/Dream and LLaMA/LLaDA blocks) behind the engine's model interface.

One file for both families: they differ only in weight names (handled by ``loader``), q/k/v biases (Qwen2 has
them) and the logit shift (Dream reads the logit of position i from the output at i-1; LLaDA does not shift).

Block (pre-norm): h = x + o(attn(rms(x))); out = h + down(silu(gate(rms(h))) * up(rms(h))); final RMSNorm; head.
Attention is bidirectional over [prefix | canvas | suffix] with rotary positions (rotate-half) and grouped-query
heads. The ops are the project's kernels (``rms_norm``/``add_rms_norm``, ``apply_rotary``, ``canvas_attention``),
so the kernel dispatcher covers this path too.

Serving interface (what ``Engine`` and ``sampler.denoise`` use): ``cfg.max_prefix/max_suffix/max_canvas``,
``device``, ``encode_context(prefixes, suffixes, capacity) -> ApproxCache`` (lays out tokens; computes nothing),
``canvas_logits(canvas (B, C), cache) -> (B, C, V)`` (a full or a cached pass, see ``cache``).
Shapes: B batch, T columns, R rows computed this pass, C canvas slots, D width, Hq/Hk heads, hd head width.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from edit_engine import kernels
from edit_engine.model.hf.cache import ApproxCache, CachePolicy
from edit_engine.model.hf.config import ArchConfig


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor  # (D,)
    wqkv: torch.Tensor  # (Hq*hd + 2*Hk*hd, D): q, k, v projections stacked
    bqkv: torch.Tensor | None  # (Hq*hd + 2*Hk*hd,) Qwen2's q/k/v biases
    wo: torch.Tensor  # (D, Hq*hd)
    bo: torch.Tensor | None  # (D,) LLaMA attention_bias=true only
    mlp_norm: torch.Tensor  # (D,)
    w13: torch.Tensor  # (2F, D): gate and up projections stacked
    w2: torch.Tensor  # (D, F)


Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class FullAttnLM:
    """Weights as plain tensors (loaded tensor by tensor from safetensors; no module init, no double copy)."""

    # Our own model's context K/V are exact and can be copied between batched requests (serve/batching.py);
    # these are not: each request needs its own ApproxCache and its own full passes.
    exact_context_cache = False
    int8 = False  # int8 serving is ours only
    tied_head = None  # logits come from the checkpoint's own head (``interfaces.CanvasModel``)

    def __init__(self, cfg: ArchConfig, embed: torch.Tensor, layers: list[LayerWeights], final_norm: torch.Tensor,
                 head: torch.Tensor, usable_vocab: int, policy: CachePolicy | None = None,
                 bos_id: int | None = None) -> None:
        self.cfg = cfg
        self.embed = embed  # (V, D)
        self.layers = layers
        self.final_norm = final_norm
        self.head_weight = head  # (V, D); the embedding itself when tied
        self.usable_vocab = usable_vocab  # logits of ids >= this (rows the tokenizer lacks) are -inf
        self.policy = policy or CachePolicy()
        self.bos_id = bos_id  # prepended to every prefix when set (tokenizer's add_bos_token)

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    def num_parameters(self) -> int:
        ts = [self.embed, self.final_norm] + ([] if self.head_weight is self.embed else [self.head_weight])
        for lw in self.layers:
            ts += [t for t in (lw.attn_norm, lw.wqkv, lw.bqkv, lw.wo, lw.bo, lw.mlp_norm, lw.w13, lw.w2)
                   if t is not None]
        return sum(t.numel() for t in ts)

    # ------------------------------------------------------------------ the block stack
    def _stack(self, tokens: torch.Tensor, pos: torch.Tensor, attend: Attend) -> torch.Tensor:
        """tokens, pos (B, R) -> final normed hidden states (B, R, D). ``attend(i, q, k, v)`` takes q (B, Hq, R, hd),
        k, v (B, Hk, R, hd) of layer i and returns (B, Hq, R, hd)."""
        c = self.cfg
        bsz, r = tokens.shape
        x = F.embedding(tokens, self.embed)  # (B, R, D)
        cos, sin = kernels.rotary_tables(pos, c.head_dim, c.rope_theta)  # (B, R, hd/2) fp32
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        res = x
        h = kernels.rms_norm(x, self.layers[0].attn_norm, c.norm_eps)
        for i, lw in enumerate(self.layers):
            qkv = F.linear(h, lw.wqkv, lw.bqkv)
            q, k, v = qkv.split((c.q_width, c.kv_width, c.kv_width), dim=-1)
            q = q.view(bsz, r, c.num_heads, c.head_dim)
            k = k.view(bsz, r, c.num_kv_heads, c.head_dim)
            q, k = kernels.apply_rotary(q, k, cos, sin)
            v = v.view(bsz, r, c.num_kv_heads, c.head_dim)
            a = attend(i, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (B, Hq, R, hd)
            a = F.linear(a.transpose(1, 2).reshape(bsz, r, c.q_width), lw.wo, lw.bo)
            h, res = kernels.add_rms_norm(res, a, lw.mlp_norm, c.norm_eps)
            gate, up = F.linear(h, lw.w13).chunk(2, dim=-1)
            m = F.linear(F.silu(gate) * up, lw.w2)
            nxt = self.layers[i + 1].attn_norm if i + 1 < len(self.layers) else self.final_norm
            h, res = kernels.add_rms_norm(res, m, nxt, c.norm_eps)
        return h

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., V); ids the tokenizer does not have get -inf."""
        logits = F.linear(h, self.head_weight)
        if self.usable_vocab < logits.shape[-1]:
            logits[..., self.usable_vocab :] = float("-inf")
        return logits

    # ------------------------------------------------------------------ reference: one plain full pass
    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, key_valid: torch.Tensor | None = None) -> torch.Tensor:
        """Bidirectional pass over tokens (B, T) at positions 0..T-1 -> logits (B, T, V), *not* shifted.

        What the checkpoint computes with an all-ones attention mask; the parity tests compare it to
        ``transformers``.
        """
        pos = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return kernels.canvas_attention(q, k, v, key_valid)

        return self.head(self._stack(tokens, pos, attend))

    # ------------------------------------------------------------------ serving
    def encode_context(self, prefixes: list[list[int]], suffixes: list[list[int]], capacity: int,
                       policy: CachePolicy | None = None, *, at_least: tuple[int, int] = (0, 0)) -> ApproxCache:
        """Lay out the context and allocate K/V for ``capacity`` canvas slots, prefixes and suffixes padded to
        at least ``at_least``. Computes nothing: the first ``canvas_logits`` call is a full pass (the context's
        K/V depend on the canvas in these models)."""
        if self.bos_id is not None:
            prefixes = [[self.bos_id, *p] for p in prefixes]
        c = self.cfg
        return ApproxCache(prefixes, suffixes, capacity, policy or self.policy, c.num_layers, c.num_kv_heads,
                           c.head_dim, self.dtype, self.device, c.shift_logits, at_least=at_least)

    @torch.no_grad()
    def canvas_logits(self, canvas: torch.Tensor, cache: ApproxCache) -> torch.Tensor:
        """One denoising pass: canvas (B, C) -> logits (B, C, V); a full or a cached pass (``cache.policy``)."""
        return self.head(self.canvas_hidden(canvas, cache))

    @torch.no_grad()
    def canvas_hidden(self, canvas: torch.Tensor, cache: ApproxCache) -> torch.Tensor:
        """The pass without the head: canvas (B, C) -> final normed hidden states (B, C, D) that predict the
        slots (already shifted for Dream-style models). The head is ``head_weight`` (untied), not ``embed``."""
        lo, hi, _full = cache.begin_pass(canvas)
        n = cache.length
        valid = cache.key_valid[:, :n]

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.k[i][:, :, lo:hi] = k
            cache.v[i][:, :, lo:hi] = v
            return kernels.canvas_attention(q, cache.k[i][:, :, :n], cache.v[i][:, :, :n], valid)

        h = self._stack(cache.tokens[:, lo:hi], cache.positions[:, lo:hi], attend)  # (B, R, D)
        idx = (cache.logit_rows - lo).unsqueeze(-1).expand(-1, -1, h.shape[-1])  # (B, C, D)
        return h.gather(1, idx)
