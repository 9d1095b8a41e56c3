"""Which open checkpoint family a folder holds, read from its ``config.json`` (never from the folder name).

Supported families (``FAMILIES``):

- ``dream``: Dream, Dream-Coder, DiffuCoder (``model_type: "Dream"``, ``architectures: ["DreamModel"]``). Qwen2
  blocks: RMSNorm, rotary with the config's theta, grouped-query attention, q/k/v biases, SwiGLU, untied head,
  bidirectional attention. Logits are *shifted*: the logit for position i is read from the output at i-1.
- ``qwen2``: a Qwen2 checkpoint trained as a masked diffusion model (Open-dCoder; ``model_type: "qwen2"``).
  Same blocks and the same shift as Dream. Accepted only with a mask token (config or tokenizer): an
  autoregressive Qwen2 has none and would fill nonsense.
- ``llada``: LLaDA (``model_type: "llada"``, ``architectures: ["LLaDAModelLM"]``), LLaMA blocks in OLMo naming
  (``d_model``, ``n_heads``, ``transformer.blocks.N.q_proj`` ...). No shift.
- ``llama``: a LLaMA checkpoint in Hugging Face naming trained as a masked diffusion model (no shift), also only
  with a mask token.

The architecture fields are named as in Hugging Face ``Qwen2Config``/``LlamaConfig`` (``hidden_size``,
``num_key_value_heads``, ``rope_theta`` or transformers 5's ``rope_parameters``) and LLaDA's OLMo-style config
(``d_model``, ``n_kv_heads``, ``mlp_hidden_size``, ``rms_norm_eps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

OUR_MODEL_TYPE = "edit-engine-mdlm"
FAMILIES = ("dream", "qwen2", "llada", "llama")
SUPPORTED_TEXT = (
    "Dream / Dream-Coder / DiffuCoder (model_type 'Dream', DreamModel), Open-dCoder (model_type 'qwen2' with a "
    "mask token), LLaDA (model_type 'llada', LLaDAModelLM), LLaMA-layout diffusion models (model_type 'llama' "
    "with a mask token), and edit-engine's own checkpoints (model_type 'edit-engine-mdlm')"
)


class UnsupportedCheckpoint(ValueError):
    """A config.json this loader cannot serve; the message names what is supported."""


@dataclass(frozen=True)
class ArchConfig:
    """Shape of an open full-attention checkpoint plus the serving limits the engine reads.

    ``max_prefix``/``max_suffix``/``max_canvas`` are what ``Engine`` reads from ``model.cfg``; they are chosen
    at load time so that prefix + canvas + suffix fits ``max_positions``.
    """

    family: str  # one of FAMILIES
    weight_layout: str  # "hf" (model.layers.N.self_attn.q_proj) | "llada" (model.transformer.blocks.N.q_proj)
    vocab_size: int  # rows of the embedding / output head (may exceed the tokenizer's vocabulary)
    hidden_size: int  # D
    num_layers: int
    num_heads: int  # query heads Hq
    num_kv_heads: int  # key/value heads Hk (grouped-query attention when Hk < Hq)
    head_dim: int  # hd
    intermediate_size: int  # SwiGLU hidden width F
    rope_theta: float
    norm_eps: float
    shift_logits: bool  # Dream-style: logit of position i comes from the output at i-1
    tie_embeddings: bool
    max_positions: int  # the longest sequence the checkpoint was trained for
    mask_token_id: int | None  # from config.json, if it names one
    pad_token_id: int | None
    eos_token_id: int | None
    bos_token_id: int | None
    max_prefix: int = 2048
    max_suffix: int = 512
    max_canvas: int = 256

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def num_parameters(self) -> int:
        """Parameter count implied by the shapes (biases ignored: under 0.1% for these models)."""
        d, f, v = self.hidden_size, self.intermediate_size, self.vocab_size
        attn = d * (self.q_width + 2 * self.kv_width) + self.q_width * d
        layer = attn + 3 * d * f + 2 * d
        return v * d * (1 if self.tie_embeddings else 2) + self.num_layers * layer + d


class _TokenIds(TypedDict):
    mask_token_id: int | None
    pad_token_id: int | None
    eos_token_id: int | None
    bos_token_id: int | None


def _first_id(value: Any) -> int | None:
    """Config token ids may be an int, a list of ints (several eos ids), or null."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, list) and value and isinstance(value[0], int):
        return int(value[0])
    return None


def _rope_theta(raw: dict[str, Any], default: float) -> float:
    """``rope_theta`` (transformers 4.x and the released checkpoints) or ``rope_parameters`` (transformers 5).

    Only plain rotary is implemented: a scaled variant (linear, dynamic, yarn, llama3) is refused.
    """
    params = raw.get("rope_parameters")
    scaling = raw.get("rope_scaling")
    for block in (params, scaling):
        if isinstance(block, dict):
            kind = block.get("rope_type", block.get("type", "default"))
            if kind not in (None, "default"):
                raise UnsupportedCheckpoint(f"rotary scaling {kind!r} is not supported (only plain rotary)")
    theta = raw.get("rope_theta")
    if theta is None and isinstance(params, dict):
        theta = params.get("rope_theta")
    return float(theta if theta is not None else default)


def detect_family(raw: dict[str, Any]) -> str:
    """The family from ``model_type`` and ``architectures``; raises ``UnsupportedCheckpoint`` otherwise."""
    mt = str(raw.get("model_type", "")).lower()
    arch = [str(a) for a in raw.get("architectures") or []]
    if mt == OUR_MODEL_TYPE:
        raise UnsupportedCheckpoint("edit-engine's own checkpoints are loaded by edit_engine.model.checkpoint")
    if mt == "dream" or "DreamModel" in arch:
        return "dream"
    if mt == "llada" or "LLaDAModelLM" in arch:
        return "llada"
    if mt == "qwen2":
        return "qwen2"
    if mt == "llama":
        return "llama"
    what = f"model_type {raw.get('model_type')!r}" + (f", architectures {arch}" if arch else "")
    raise UnsupportedCheckpoint(f"unsupported checkpoint ({what}); supported: {SUPPORTED_TEXT}")


def _need(raw: dict[str, Any], *names: str) -> Any:
    for n in names:
        if raw.get(n) is not None:
            return raw[n]
    raise UnsupportedCheckpoint(f"config.json lacks {' / '.join(names)}")


def parse_config(raw: dict[str, Any]) -> ArchConfig:
    """``config.json`` -> ``ArchConfig`` (serving limits at their defaults; the loader clips them)."""
    family = detect_family(raw)
    ids = _TokenIds(
        mask_token_id=_first_id(raw.get("mask_token_id")),
        pad_token_id=_first_id(raw.get("pad_token_id")),
        eos_token_id=_first_id(raw.get("eos_token_id")),
        bos_token_id=_first_id(raw.get("bos_token_id")),
    )
    if family == "llada":
        return _parse_llada(raw, ids)
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise UnsupportedCheckpoint(f"hidden_act {act!r} is not supported (SwiGLU with silu only)")
    if raw.get("use_sliding_window"):
        raise UnsupportedCheckpoint("use_sliding_window=true is not supported (full bidirectional attention only)")
    if raw.get("mlp_bias"):
        raise UnsupportedCheckpoint("mlp_bias=true is not supported")
    d = int(_need(raw, "hidden_size"))
    heads = int(_need(raw, "num_attention_heads"))
    kv = int(raw.get("num_key_value_heads") or heads)
    hd = int(raw.get("head_dim") or d // heads)
    return ArchConfig(
        family=family,
        weight_layout="hf",
        vocab_size=int(_need(raw, "vocab_size")),
        hidden_size=d,
        num_layers=int(_need(raw, "num_hidden_layers")),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hd,
        intermediate_size=int(_need(raw, "intermediate_size")),
        rope_theta=_rope_theta(raw, 10000.0),
        norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        shift_logits=family in ("dream", "qwen2"),
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        max_positions=int(raw.get("max_position_embeddings") or 32768),
        **ids,
    )


def _parse_llada(raw: dict[str, Any], ids: _TokenIds) -> ArchConfig:
    """LLaDA's OLMo-style config: only the LLaMA block with RMSNorm, rotary and silu is served."""
    checks = {
        "block_type": ("llama", raw.get("block_type", "llama")),
        "layer_norm_type": ("rms", raw.get("layer_norm_type", "rms")),
        "activation_type": ("silu", raw.get("activation_type", "silu")),
    }
    for name, (want, got) in checks.items():
        if str(got).lower() != want:
            raise UnsupportedCheckpoint(f"LLaDA config {name}={got!r} is not supported (only {want!r})")
    for flag in ("alibi", "attention_layer_norm", "scale_logits", "input_emb_norm", "include_bias"):
        if raw.get(flag):
            raise UnsupportedCheckpoint(f"LLaDA config {flag}=true is not supported")
    if raw.get("rope") is False:
        raise UnsupportedCheckpoint("LLaDA config rope=false is not supported")
    d = int(_need(raw, "d_model", "hidden_size"))
    heads = int(_need(raw, "n_heads", "num_attention_heads"))
    kv = int(raw.get("n_kv_heads") or raw.get("num_key_value_heads") or heads)
    mlp = raw.get("mlp_hidden_size") or int(raw.get("mlp_ratio", 4) * d)
    return ArchConfig(
        family="llada",
        weight_layout="llada",
        vocab_size=int(raw.get("embedding_size") or _need(raw, "vocab_size")),
        hidden_size=d,
        num_layers=int(_need(raw, "n_layers", "num_hidden_layers")),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=d // heads,
        intermediate_size=int(mlp),
        rope_theta=_rope_theta(raw, 10000.0),
        norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        shift_logits=False,
        tie_embeddings=bool(raw.get("weight_tying", False)),
        max_positions=int(raw.get("max_sequence_length") or 4096),
        **ids,
    )
