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
from edit_engine.model import context_cache
from edit_engine.model.context_cache import ContextCache

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
        self, prefixes: list[list[int]], suffixes: list[list[int]], capacity: int, *, at_least: tuple[int, int] = (0, 0)
    ) -> ContextCache:
        """Run the context once and keep its keys/values, with room for ``capacity`` canvas slots.

        Prefixes are left-padded and suffixes right-padded to common lengths, at least ``at_least`` (a caller
        that keeps the shapes it runs to a few sizes); padding is masked out.
        """
        bsz = len(prefixes)
        pl = max(max((len(p) for p in prefixes), default=0), at_least[0])
        sl = max(max((len(s) for s in suffixes), default=0), at_least[1])
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
            return context_cache.pending_and_canvas(self, canvas, cache)
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
        """Edit a batch-of-one context cache in place (``context_cache.edit`` documents it): keep its first
        ``keep`` prefix tokens, append ``append``, move the suffix or replace it with ``suffix``. Returns the
        appended tokens' final hidden states, (1, n, D); ``defer`` leaves them pending for the next pass."""
        return context_cache.edit(self, cache, keep, append, suffix, capacity, defer)

    @torch.no_grad()
    def extend_prefix(self, cache: ContextCache, tokens: list[int]) -> torch.Tensor:
        """Append prefix tokens to a batch-of-one cache in place (the suffix moves; see ``edit_context``).
        Returns the final hidden states of the new tokens, (1, n, D)."""
        context_cache.track(self, cache)
        return self.edit_context(cache, cache.prefix_len, tokens)

    def _rotate(self, k: torch.Tensor, pos: torch.Tensor, inverse: bool = False) -> torch.Tensor:
        """Rotary on keys laid out (N, H, T, hd) at positions (1, T); ``inverse`` undoes it."""
        return context_cache.rotate(self, k, pos, inverse)
