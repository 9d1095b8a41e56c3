"""Load an open diffusion checkpoint from a local folder: ``config.json``, ``*.safetensors`` (one file, or shards
listed in ``model.safetensors.index.json``), ``tokenizer.json`` / ``tokenizer_config.json``.

Local files only, never the network: a Hugging Face id (``Dream-org/Dream-Coder-v0-Instruct-7B``) is resolved
only if it is already in the local Hugging Face cache (``HF_HUB_CACHE``/``HF_HOME``, as ``HF_HUB_OFFLINE=1``
would), otherwise the error says how to download it. Tensors are read one at a time through ``safe_open``
(memory-mapped), converted to the serving dtype and moved to the device, so peak host memory stays near one
copy of the weights. Dtype: bf16 on CUDA; on CPU the dtype asked for (fp32 by default, bf16 halves the memory).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from edit_engine.model.hf.cache import CachePolicy
from edit_engine.model.hf.config import OUR_MODEL_TYPE, ArchConfig, UnsupportedCheckpoint, parse_config
from edit_engine.model.hf.fullattn import FullAttnLM, LayerWeights
from edit_engine.model.hf.tokenizer import OpenTokenizer

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_hub_id(path: str | Path) -> bool:
    s = str(path)
    return bool(_HUB_ID.match(s)) and not Path(s).exists()


def download_hint(name: str) -> str:
    local = f"~/models/{name.split('/')[-1]}"
    return (f"model path {name!r} is not a directory. edit-engine loads models from local folders only and never "
            f"downloads. If {name!r} is a Hugging Face model id, download it first (on any machine with "
            f"network access): `huggingface-cli download {name} --local-dir {local}` and pass "
            f"--model {local}")


def _hub_cache_snapshot(name: str) -> Path | None:
    """A complete snapshot of ``name`` in the local Hugging Face cache, without any network access."""
    roots = [os.environ.get("HF_HUB_CACHE"),
             os.path.join(os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")]
    for root in filter(None, roots):
        snaps = Path(root) / ("models--" + name.replace("/", "--")) / "snapshots"
        if snaps.is_dir():
            for snap in sorted(snaps.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
                if (snap / "config.json").is_file():
                    return snap
    return None


def resolve_folder(path: str | Path) -> Path:
    """A local checkpoint folder for ``path`` (a folder, or a hub id already in the local cache)."""
    d = Path(path).expanduser()
    if d.is_dir():
        return d
    if looks_like_hub_id(path):
        snap = _hub_cache_snapshot(str(path))
        if snap is not None:
            return snap
        raise UnsupportedCheckpoint(download_hint(str(path)))
    raise UnsupportedCheckpoint(f"model path {str(path)!r} is not a directory")


def is_open_checkpoint(path: str | Path | None) -> bool:
    """True for a folder whose config.json is not edit-engine's own, and for a hub id (to explain it)."""
    if path is None:
        return False
    d = Path(path).expanduser()
    if not d.is_dir():
        return looks_like_hub_id(path)
    try:
        raw = json.loads((d / "config.json").read_text())
    except (OSError, ValueError):
        return False  # let edit_engine.model.checkpoint report the missing or malformed file
    return isinstance(raw, dict) and raw.get("model_type") != OUR_MODEL_TYPE


class _Weights:
    """Tensor name -> file, from ``model.safetensors.index.json`` or the folder's ``*.safetensors``."""

    def __init__(self, d: Path) -> None:
        index = d / "model.safetensors.index.json"
        self.where: dict[str, Path] = {}
        if index.is_file():
            wm = json.loads(index.read_text()).get("weight_map", {})
            if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(f, str) for k, f in wm.items()):
                raise UnsupportedCheckpoint("model.safetensors.index.json: weight_map must map names to file names")
            root = d.resolve()
            for f in set(wm.values()):  # a shard is a file of this folder, never a path out of it
                if (d / f).resolve().parent != root:
                    raise UnsupportedCheckpoint(f"model.safetensors.index.json names {f!r}, outside the model folder")
            self.where = {k: d / f for k, f in wm.items()}
            missing = sorted({str(p.name) for p in self.where.values() if not p.is_file()})
            if missing:
                raise UnsupportedCheckpoint(f"shards listed in the index are missing: {', '.join(missing)}")
        else:
            files = sorted(d.glob("*.safetensors"))
            if not files:
                raise UnsupportedCheckpoint(f"{str(d)!r} has no *.safetensors weights (PyTorch .bin is not read)")
            for f in files:
                with safe_open(str(f), framework="pt") as sf:
                    for k in sf.keys():  # noqa: SIM118 (safe_open is not a mapping)
                        self.where[k] = f
        self._open: dict[Path, Any] = {}

    def has(self, name: str) -> bool:
        return name in self.where

    def get(self, name: str, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        if name not in self.where:
            raise UnsupportedCheckpoint(f"weight {name!r} is missing from the checkpoint")
        f = self.where[name]
        if f not in self._open:
            self._open[f] = safe_open(str(f), framework="pt", device="cpu")
        return self._open[f].get_tensor(name).to(device=device, dtype=dtype)

    def close(self) -> None:
        self._open.clear()


def _names(arch: ArchConfig, i: int) -> dict[str, str]:
    """Per-layer weight names of the two layouts."""
    if arch.weight_layout == "llada":
        b = f"model.transformer.blocks.{i}."
        return {"attn_norm": b + "attn_norm.weight", "q": b + "q_proj", "k": b + "k_proj", "v": b + "v_proj",
                "qkv": b + "att_proj", "o": b + "attn_out", "mlp_norm": b + "ff_norm.weight",
                "gate": b + "ff_proj.weight", "up": b + "up_proj.weight", "down": b + "ff_out.weight"}
    b = f"model.layers.{i}."
    return {"attn_norm": b + "input_layernorm.weight", "q": b + "self_attn.q_proj", "k": b + "self_attn.k_proj",
            "v": b + "self_attn.v_proj", "qkv": "", "o": b + "self_attn.o_proj",
            "mlp_norm": b + "post_attention_layernorm.weight", "gate": b + "mlp.gate_proj.weight",
            "up": b + "mlp.up_proj.weight", "down": b + "mlp.down_proj.weight"}


def _global_names(arch: ArchConfig) -> tuple[str, str, str]:
    if arch.weight_layout == "llada":
        return "model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight"
    return "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"


def _check(name: str, t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    if tuple(t.shape) != shape:
        raise UnsupportedCheckpoint(f"weight {name} has shape {tuple(t.shape)}, config.json implies {shape}")
    return t


def _layer(w: _Weights, arch: ArchConfig, i: int, dtype: torch.dtype, dev: torch.device | str) -> LayerWeights:
    n = _names(arch, i)
    d, qw, kw, f = arch.hidden_size, arch.q_width, arch.kv_width, arch.intermediate_size
    if n["qkv"] and w.has(n["qkv"] + ".weight"):  # OLMo-style fused projection
        wqkv = _check(n["qkv"], w.get(n["qkv"] + ".weight", dtype, dev), (qw + 2 * kw, d))
        bqkv = w.get(n["qkv"] + ".bias", dtype, dev) if w.has(n["qkv"] + ".bias") else None
    else:
        parts = [_check(n[x], w.get(n[x] + ".weight", dtype, dev), (rows, d))
                 for x, rows in (("q", qw), ("k", kw), ("v", kw))]
        wqkv = torch.cat(parts, 0)
        biases = [n[x] + ".bias" for x in ("q", "k", "v")]
        bqkv = torch.cat([w.get(b, dtype, dev) for b in biases], 0) if all(w.has(b) for b in biases) else None
        del parts
    wo = _check(n["o"], w.get(n["o"] + ".weight", dtype, dev), (d, qw))
    bo = w.get(n["o"] + ".bias", dtype, dev) if w.has(n["o"] + ".bias") else None
    gate = _check(n["gate"], w.get(n["gate"], dtype, dev), (f, d))
    up = _check(n["up"], w.get(n["up"], dtype, dev), (f, d))
    w13 = torch.cat([gate, up], 0)
    del gate, up
    return LayerWeights(
        attn_norm=_check(n["attn_norm"], w.get(n["attn_norm"], dtype, dev), (d,)),
        wqkv=wqkv, bqkv=bqkv, wo=wo, bo=bo,
        mlp_norm=_check(n["mlp_norm"], w.get(n["mlp_norm"], dtype, dev), (d,)),
        w13=w13,
        w2=_check(n["down"], w.get(n["down"], dtype, dev), (d, f)),
    )


def serving_dtype(device: torch.device | str, dtype: torch.dtype | str | None) -> torch.dtype:
    """What an open model computes in: the dtype asked for; else ``EDIT_ENGINE_HF_DTYPE``, else
    ``EDIT_ENGINE_DTYPE``; else bf16 on CUDA (a 7B model in float32 does not fit a 24 GB GPU) and float32 on CPU."""
    from edit_engine.model.dtypes import check_dtype_name
    from edit_engine.model.dtypes import serving_dtype as asked_dtype

    env = os.environ.get("EDIT_ENGINE_HF_DTYPE", "")
    if dtype is None and env.strip():
        return asked_dtype(check_dtype_name(env, "EDIT_ENGINE_HF_DTYPE"), device=device)
    return asked_dtype(dtype, torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32, device)


def load_model(path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype | str | None = None,
               policy: CachePolicy | None = None, max_prefix: int = 2048, max_suffix: int = 512,
               max_canvas: int = 256) -> tuple[FullAttnLM, OpenTokenizer, Path, dict[str, Any]]:
    """Read the folder and build the model and tokenizer adapters. Returns (model, tokenizer, folder, record)."""
    d = resolve_folder(path)
    cfg_file = d / "config.json"
    if not cfg_file.is_file():
        raise UnsupportedCheckpoint(f"{str(d)!r} has no config.json")
    raw = json.loads(cfg_file.read_text())
    arch = parse_config(raw)
    # Serving limits: prefix + canvas + suffix (+ bos) must fit the trained context.
    room = arch.max_positions - 1
    canvas = min(max_canvas, room // 4)
    suffix = min(max_suffix, (room - canvas) // 4)
    prefix = min(max_prefix, room - canvas - suffix)
    arch = replace(arch, max_prefix=prefix, max_suffix=suffix, max_canvas=canvas)
    tok = OpenTokenizer.from_folder(d, arch)
    dt = serving_dtype(device, dtype)
    if dt == torch.int8:
        raise UnsupportedCheckpoint("int8 serving is for edit-engine checkpoints; open models serve in float32, "
                                    "bfloat16 or float16")
    w = _Weights(d)
    try:
        emb_name, norm_name, head_name = _global_names(arch)
        embed = _check(emb_name, w.get(emb_name, dt, device), (arch.vocab_size, arch.hidden_size))
        layers = [_layer(w, arch, i, dt, device) for i in range(arch.num_layers)]
        final_norm = _check(norm_name, w.get(norm_name, dt, device), (arch.hidden_size,))
        if arch.tie_embeddings or not w.has(head_name):
            head = embed
        else:
            head = _check(head_name, w.get(head_name, dt, device), (arch.vocab_size, arch.hidden_size))
    finally:
        w.close()
    bos = tok.bos_id if tok.add_bos else None
    model = FullAttnLM(arch, embed, layers, final_norm, head, min(tok.vocab_size, arch.vocab_size),
                       policy or CachePolicy.from_env(), bos)
    record = {"family": arch.family, "model_type": raw.get("model_type"), "architectures": raw.get("architectures"),
              "parameters": model.num_parameters(), "dtype": str(dt).removeprefix("torch."),
              "cache_mode": model.policy.mode, "refresh_every": model.policy.refresh_every,
              "mask_id": tok.mask_id, "pad_id": tok.pad_id}
    return model, tok, d, record
