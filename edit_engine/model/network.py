"""The masked diffusion transformer, with an attention layout that makes the context cache exact.

A sequence is a *context* (prefix, suffix) and a *canvas* (the hole being filled). Who attends to whom:

    queries \\ keys     prefix      suffix      canvas
    prefix             causal      -           -
    suffix             -           all         -
    canvas             all         all         all

Context keys and values never depend on the canvas, so they are computed once per request
(``encode_context``) and every denoising pass computes only the canvas rows (``canvas_logits``) against them:
the cache is exact by construction, unlike Fast-dLLM's approximate one. The prefix is causal, so text typed at
the cursor only appends to it; the suffix sees only itself.

Positions: prefix token i sits at i, canvas slot j at P + j, suffix token i at P + ``max_canvas`` + i (P = prefix
length). The suffix's position does not depend on the canvas length, so growing the canvas invalidates nothing.
Training (``forward``) and serving use the same mask (``layout_mask``) and positions (``layout_positions``).

Architecture: pre-norm transformer, RMSNorm, rotary positions (rotate-half), SwiGLU MLP, tied embeddings.
Shapes in comments: B batch, T tokens, C canvas slots, L cached keys, D model width, H heads, hd head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from edit_engine import kernels

# Token kinds of the layout (an int8 tensor beside the token ids).
ABSENT, PREFIX, SUFFIX, CANVAS = 0, 1, 2, 3


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the transformer (checked: a ``config.json`` with wrong types or sizes is a ValueError). Presets below; a checkpoint stores its own in ``config.json``."""

    vocab_size: int = 8192  # BPE vocabulary incl. the special tokens (pad=0, mask=1, eos=2)
    d_model: int = 256  # residual width
    n_layers: int = 6  # transformer blocks
    n_heads: int = 4  # attention heads (head width = d_model / n_heads)
    d_ff: int = 704  # SwiGLU hidden width (about 8/3 * d_model, rounded to 32)
    max_canvas: int = 256  # suffix starts this many positions after the prefix; also the longest fill
    max_prefix: int = 1024  # prefix tokens kept (the nearest ones) when serving
    max_suffix: int = 256  # suffix tokens kept (the nearest ones) when serving
    rope_theta: float = 10000.0  # rotary base
    norm_eps: float = 1e-5
    family: str = field(default="edit-engine")  # checkpoint family tag
    # "diffusion": the masked-diffusion infiller. "ar": the autoregressive baseline, the same network trained
    # causally on prefix-suffix-middle sequences (edit_engine/decoding/ar.py) and decoded with a key/value cache.
    objective: str = "diffusion"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def __post_init__(self) -> None:
        for f in fields(self):
            v, want = getattr(self, f.name), type(f.default)
            ok = isinstance(v, want) and not isinstance(v, bool) or (want is float and type(v) is int)
            if not ok:
                raise ValueError(f"config {f.name}={v!r}: expected {want.__name__}")
        if self.vocab_size > MAX_VOCAB or min(self.vocab_size, self.d_model, self.n_layers, self.n_heads, self.d_ff,
                                              self.max_canvas) < 1 or self.d_model % self.n_heads:
            raise ValueError(f"config: sizes out of range (vocab_size 1..{MAX_VOCAB:,}, every width >= 1, d_model "
                             "divisible by n_heads)")
        if self.objective not in ("diffusion", "ar"):
            raise ValueError(f"config objective={self.objective!r}: expected 'diffusion' or 'ar'")

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> ModelConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})  # type: ignore[arg-type]


MAX_VOCAB = 1 << 20  # a vocabulary beyond this is a broken config, not a model

PRESETS: dict[str, ModelConfig] = {
    # For unit tests: random weights, runs in milliseconds.
    "tiny": ModelConfig(vocab_size=512, d_model=32, n_layers=2, n_heads=2, d_ff=96, max_canvas=64,
                        max_prefix=256, max_suffix=128),
    # The packaged default: trained on 2 CPU cores.
    "small": ModelConfig(d_model=256, n_layers=4, n_heads=4, d_ff=704),
    # Trained on one GPU in minutes (benchmarks/gpu_train.sh); about 13 M parameters, 27 MB in bf16.
    "mid": ModelConfig(d_model=384, n_layers=6, n_heads=6, d_ff=960, max_prefix=768, max_suffix=256),
    # Larger ones for GPU training.
    "base": ModelConfig(d_model=512, n_layers=8, n_heads=8, d_ff=1376, max_prefix=2048, max_suffix=512),
    "large": ModelConfig(vocab_size=16384, d_model=768, n_layers=12, n_heads=12, d_ff=2048,
                         max_prefix=2048, max_suffix=512),
}


def layout_mask(kind: torch.Tensor) -> torch.Tensor:
    """Boolean attention mask (B, 1, T, T), True = may attend, from token kinds (B, T).

    Prefix tokens must appear in the tensor in position order (causality is by tensor index).
    An absent (padding) query attends to itself only, so no row is empty.
    """
    q = kind.unsqueeze(-1)  # (B, T, 1)
    k = kind.unsqueeze(-2)  # (B, 1, T)
    t = kind.shape[-1]
    idx = torch.arange(t, device=kind.device)
    causal = idx.unsqueeze(-1) >= idx.unsqueeze(0)  # (T, T)
    present = k != ABSENT
    allow = ((q == PREFIX) & (k == PREFIX) & causal) | ((q == SUFFIX) & (k == SUFFIX)) | ((q == CANVAS) & present)
    allow |= torch.eye(t, dtype=torch.bool, device=kind.device)
    return allow.unsqueeze(1)


def layout_positions(kind: torch.Tensor, max_canvas: int) -> torch.Tensor:
    """Rotary positions (B, T) from token kinds: prefix 0..P-1, canvas P.., suffix P+max_canvas.."""
    is_p, is_s, is_c = (kind == PREFIX).long(), (kind == SUFFIX).long(), (kind == CANVAS).long()
    plen = is_p.sum(-1, keepdim=True)  # (B, 1)
    pos = (is_p.cumsum(-1) - 1) * is_p
    pos = pos + (plen + is_c.cumsum(-1) - 1) * is_c
    pos = pos + (plen + max_canvas + is_s.cumsum(-1) - 1) * is_s
    return pos


class Block(nn.Module):
    """One transformer block's weights; the norms are applied by the caller (fused with the residual add)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, f = cfg.d_model, cfg.d_ff
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(d))
        self.w13 = nn.Linear(d, 2 * f, bias=False)  # gate and up projections, fused
        self.w2 = nn.Linear(f, d, bias=False)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = project(self.w13, x).chunk(2, dim=-1)
        return project(self.w2, F.silu(gate) * up)


def project(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A block's projection: ``kernels.linear`` on a float layer's weight, the int8 layer itself once quantized."""
    if isinstance(layer, nn.Linear):
        return kernels.linear(x, layer.weight)
    return layer(x)  # type: ignore[no-any-return]


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


class DiffusionLM(nn.Module):
    exact_context_cache = True  # context K/V never depend on the canvas (module doc)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.final_norm = nn.Parameter(torch.ones(cfg.d_model))
        self.int8_head: kernels.Int8Linear | None = None  # set by quantize_int8
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = 0.02
        nn.init.normal_(self.embed.weight, std=std)
        for b in self.blocks:
            assert isinstance(b, Block)
            nn.init.normal_(b.wqkv.weight, std=std)
            nn.init.normal_(b.w13.weight, std=std)
            # Scaled init of the residual projections (GPT-2).
            nn.init.normal_(b.wo.weight, std=std / math.sqrt(2 * self.cfg.n_layers))
            nn.init.normal_(b.w2.weight, std=std / math.sqrt(2 * self.cfg.n_layers))

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def num_parameters(self) -> int:
        """Weights of the network, int8 ones included (``quantize_int8`` turns them into buffers; the int8 copy of
        the tied head is not counted twice)."""
        quantized = (m for m in self.modules() if isinstance(m, kernels.Int8Linear) and m is not self.int8_head)
        return sum(p.numel() for p in self.parameters()) + sum(m.qweight.numel() for m in quantized)

    # ------------------------------------------------------------------ shared pieces
    def _qkv(
        self, b: Block, x: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, D), rot = (cos, sin) (B, T, hd/2) in x's dtype -> q, k, v each (B, H, T, hd), rotary
        applied to q and k."""
        bsz, t, _ = x.shape
        h, hd = self.cfg.n_heads, self.cfg.head_dim
        q, k, v = project(b.wqkv, x).view(bsz, t, 3, h, hd).unbind(2)  # each (B, T, H, hd)
        q, k = kernels.apply_rotary(q, k, rot[0], rot[1])
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _run(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The block stack. ``attend(i, q, k, v) -> (B, H, T, hd)`` does layer i's attention."""
        eps = self.cfg.norm_eps
        blocks = [b for b in self.blocks if isinstance(b, Block)]
        norms = [b.attn_norm for b in blocks[1:]] + [self.final_norm]  # the norm after each block
        res = x
        h = kernels.rms_norm(x, blocks[0].attn_norm, eps)
        cos, sin = kernels.rotary_tables(pos, self.cfg.head_dim, self.cfg.rope_theta)  # (B, T, hd/2), once
        rot = (cos.to(x.dtype), sin.to(x.dtype))
        for i, b in enumerate(blocks):
            q, k, v = self._qkv(b, h, rot)
            a = project(b.wo, attend(i, q, k, v).transpose(1, 2).reshape(x.shape))
            h, res = kernels.add_rms_norm(res, a, b.mlp_norm, eps)
            h, res = kernels.add_rms_norm(res, b.mlp(h), norms[i], eps)
        return h

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Tied output head: (..., D) -> (..., V)."""
        if self.int8_head is not None:
            return self.int8_head(h)
        return kernels.linear(h, self.embed.weight)

    @property
    def tied_head(self) -> torch.Tensor | None:
        """The tied head's weight (the embedding), None once the head is int8 (``interfaces.CanvasModel``)."""
        return None if self.int8 else self.embed.weight

    # ------------------------------------------------------------------ int8 serving
    @property
    def int8(self) -> bool:
        """True after ``quantize_int8``: the linear layers and the head compute in int8."""
        return self.int8_head is not None

    @torch.no_grad()
    def quantize_int8(self) -> DiffusionLM:
        """Serve with int8 linear layers (kernels/int8.py), CPU only: every block's projections and the tied head
        hold int8 weights with a scale per output channel, and their inputs are quantized per token on the fly.
        The embedding lookup, the norms, attention and the context cache stay float32. The weights use the range
        the CPU's int8 GEMM sums exactly (``kernels.int8.weight_qmax``). Inference only; returns self. Measured
        speed and quality: docs/results-archive-2026-12-05.md."""
        if self.int8:
            return self
        if self.device.type != "cpu":
            raise ValueError(f"int8 serving runs on the CPU; the model is on {self.device} (use bf16 on a GPU)")
        for b in self.blocks:
            for name in ("wqkv", "wo", "w13", "w2"):
                setattr(b, name, kernels.Int8Linear(getattr(b, name).weight.float()))
        self.int8_head = kernels.Int8Linear(self.embed.weight.float())
        self.float().requires_grad_(False)
        return self

    # ------------------------------------------------------------------ training / reference: full forward
    def forward(self, tokens: torch.Tensor, kind: torch.Tensor, mask: torch.Tensor | None = None,
                pos: torch.Tensor | None = None) -> torch.Tensor:
        """Full recompute. tokens, kind: (B, T) -> final hidden states (B, T, D).

        Used for training and by the reference sampler. The mask and positions follow from ``kind`` unless
        given (several holes per row in training: ``train.windows``).
        """
        mask = layout_mask(kind) if mask is None else mask
        pos = layout_positions(kind, self.cfg.max_canvas) if pos is None else pos

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        return self._run(self.embed(tokens), pos, attend)

    # ------------------------------------------------------------------ serving: context once, canvas per pass
    @torch.no_grad()
    def encode_context(
        self, prefixes: list[list[int]], suffixes: list[list[int]], capacity: int
    ) -> ContextCache:
        """Run the context once and keep its keys/values, with room for ``capacity`` canvas slots.

        Prefixes are left-padded and suffixes right-padded to common lengths; padding is masked out.
        """
        bsz = len(prefixes)
        pl = max((len(p) for p in prefixes), default=0)
        sl = max((len(s) for s in suffixes), default=0)
        L = pl + sl
        dev = self.device
        tokens = torch.zeros(bsz, L, dtype=torch.long)
        kind = torch.zeros(bsz, L, dtype=torch.int8)
        for r, (p, s) in enumerate(zip(prefixes, suffixes, strict=True)):
            if p:
                tokens[r, pl - len(p) : pl] = torch.tensor(p)
                kind[r, pl - len(p) : pl] = PREFIX
            if s:
                tokens[r, pl : pl + len(s)] = torch.tensor(s)
                kind[r, pl : pl + len(s)] = SUFFIX
        tokens, kind = tokens.to(dev), kind.to(dev)
        canvas_start = (kind == PREFIX).sum(-1).long()  # (B,)
        dtype = self.embed.weight.dtype
        h, hd = self.cfg.n_heads, self.cfg.head_dim
        ks = [torch.zeros(bsz, h, L + capacity, hd, device=dev, dtype=dtype) for _ in self.blocks]
        vs = [torch.zeros(bsz, h, L + capacity, hd, device=dev, dtype=dtype) for _ in self.blocks]
        key_valid = torch.ones(bsz, L + capacity, dtype=torch.bool, device=dev)
        key_valid[:, :L] = kind != ABSENT
        if L > 0:
            mask = layout_mask(kind)
            pos = layout_positions(kind, self.cfg.max_canvas)

            def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                ks[i][:, :, :L] = k
                vs[i][:, :, :L] = v
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

            self._run(self.embed(tokens), pos, attend)
        return ContextCache(ks, vs, key_valid, canvas_start, L, capacity)

    @torch.no_grad()
    def canvas_logits(self, canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:
        """One denoising pass: canvas tokens (B, C) -> logits (B, C, V), against the cached context."""
        return self.head(self.canvas_hidden(canvas, cache))

    @torch.no_grad()
    def canvas_hidden(self, canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:
        """One denoising pass up to the head: canvas tokens (B, C) -> final hidden states (B, C, D)."""
        bsz, c = canvas.shape
        if c > cache.capacity:
            raise ValueError(f"canvas of {c} slots exceeds the cache's capacity {cache.capacity}")
        if cache.pending is not None:
            return _pending_and_canvas(self, canvas, cache)
        L = cache.ctx_len
        pos = cache.canvas_start.unsqueeze(-1) + torch.arange(c, device=canvas.device)  # (B, C)
        valid = cache.key_valid[:, : L + c]

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.k[i][:, :, L : L + c] = k
            cache.v[i][:, :, L : L + c] = v
            return kernels.canvas_attention(q, cache.k[i][:, :, : L + c], cache.v[i][:, :, : L + c], valid)

        return self._run(self.embed(canvas), pos, attend)

    # ------------------------------------------------------------------ incremental context (batch of one)
    @torch.no_grad()
    def edit_context(self, cache: ContextCache, keep: int, append: list[int], suffix: list[int] | None = None,
                     capacity: int | None = None, defer: bool = False) -> torch.Tensor:
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
        self._track(cache)
        p_old, s_old = cache.prefix_len, cache.ctx_len - cache.prefix_len
        if not 0 <= keep <= p_old:
            raise ValueError(f"keep={keep} outside the cached prefix of {p_old} tokens")
        keep, append = _fold_pending(cache, keep, append)
        n = len(append)
        p_new = keep + n
        s_new = s_old if suffix is None else len(suffix)
        cap = max(cache.capacity, capacity or 0)
        _reserve(cache, p_new + s_new + cap)
        dev, mc = self.device, self.cfg.max_canvas
        if suffix is None and s_old and p_new != p_old:  # move: values copied, keys re-rotated from unrotated
            assert cache.suffix_k is not None
            pos = p_new + mc + torch.arange(s_old, device=dev).unsqueeze(0)  # (1, S)
            # Every layer's keys in one rotation, every layer's values in one copy (the rows may overlap).
            keys = self._rotate(torch.cat(cache.suffix_k), pos)
            values = torch.cat([v[:, :, p_old : p_old + s_old] for v in cache.v])
            for i in range(len(cache.k)):
                cache.v[i][:, :, p_new : p_new + s_old] = values[i : i + 1]
                cache.k[i][:, :, p_new : p_new + s_old] = keys[i : i + 1]
        h = torch.zeros(1, 0, self.cfg.d_model, device=dev, dtype=self.embed.weight.dtype)
        if n and defer:
            cache.pending = (keep, list(append))
        elif n:
            x = self.embed(torch.tensor([append], device=dev))  # (1, n, D)
            pos = torch.arange(keep, p_new, device=dev).unsqueeze(0)  # (1, n)
            causal = torch.arange(p_new, device=dev).unsqueeze(0) <= pos.transpose(0, 1)  # (n, P_new)

            def attend_prefix(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                cache.k[i][:, :, keep:p_new] = k
                cache.v[i][:, :, keep:p_new] = v
                return F.scaled_dot_product_attention(
                    q, cache.k[i][:, :, :p_new], cache.v[i][:, :, :p_new], attn_mask=causal)

            h = self._run(x, pos, attend_prefix)
        if suffix is not None and suffix:  # replace: recompute at the new positions (suffix sees only itself)
            x = self.embed(torch.tensor([suffix], device=dev))
            pos = p_new + mc + torch.arange(s_new, device=dev).unsqueeze(0)
            raw: list[torch.Tensor] = []

            def attend_suffix(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                cache.k[i][:, :, p_new : p_new + s_new] = k
                cache.v[i][:, :, p_new : p_new + s_new] = v
                raw.append(self._rotate(k, pos, inverse=True))
                return F.scaled_dot_product_attention(q, k, v)

            self._run(x, pos, attend_suffix)
            cache.suffix_k = raw
        elif suffix is not None:
            cache.suffix_k = None
        cache.prefix_len, cache.ctx_len, cache.capacity = p_new, p_new + s_new, cap
        cache.canvas_start = torch.full((1,), p_new, dtype=torch.long, device=dev)
        return h

    @torch.no_grad()
    def extend_prefix(self, cache: ContextCache, tokens: list[int]) -> torch.Tensor:
        """Append prefix tokens to a batch-of-one cache in place (the suffix moves; see ``edit_context``).
        Returns the final hidden states of the new tokens, (1, n, D)."""
        self._track(cache)
        return self.edit_context(cache, cache.prefix_len, tokens)

    def _track(self, cache: ContextCache) -> None:
        """Start tracking a cache made by ``encode_context``: its prefix length and unrotated suffix keys."""
        if cache.prefix_len >= 0:
            return
        if cache.batch != 1:
            raise ValueError(f"incremental edits need a batch of one, got {cache.batch}")
        p = int(cache.canvas_start[0])  # one host read, when a cache is first edited
        s = cache.ctx_len - p
        cache.prefix_len = p
        if s:
            pos = p + self.cfg.max_canvas + torch.arange(s, device=self.device).unsqueeze(0)
            # The inverse rotation with the very tables that rotated them (one rounding, no angle error).
            cache.suffix_k = [self._rotate(k[:, :, p : p + s], pos, inverse=True) for k in cache.k]

    def _rotate(self, k: torch.Tensor, pos: torch.Tensor, inverse: bool = False) -> torch.Tensor:
        """Rotary on keys laid out (N, H, T, hd) at positions (1, T); ``inverse`` undoes it."""
        cos, sin = kernels.rotary_tables(pos, self.cfg.head_dim, self.cfg.rope_theta)  # (1, T, hd/2)
        if inverse:
            sin = -sin
        kt = k.transpose(1, 2)  # (1, T, H, hd)
        _, out = kernels.apply_rotary(kt, kt, cos.to(k.dtype), sin.to(k.dtype))
        return out.transpose(1, 2)


def _pending_and_canvas(model: DiffusionLM, canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:
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
