"""Checkpoint directories: ``config.json``, ``model.safetensors``, ``tokenizer.json``, ``training.json``.

Weights are stored in bf16 (half the bytes; the packaged model stays small) and loaded into the dtype asked
for. Loading reads local files only.

Serving dtype (``dtypes.parse_dtype``; ``Engine.load(dtype=...)``, ``--dtype``, ``EDIT_ENGINE_DTYPE``): ``auto``
by default (``dtypes.auto_dtype``: bf16 on a GPU and on a CPU with native bf16, else float32; a bf16 choice is
served only after it agrees with float32 on a probe, ``probe_agreement``). bfloat16 computes in bf16 (activations round to 8 bits of mantissa); on a CPU with avx512_bf16 or
AMX it is faster, on one without them much slower (emulated), and it can change a fill (MODEL.md, "Evaluation",
serving options). int8 (CPU only) holds the linear layers' weights as int8 and quantizes activations per token
(``DiffusionLM.quantize_int8``, kernels/int8.py); it is taken only on CPUs with an int8 dot-product unit
(AVX512-VNNI, AVX-VNNI or AMX) whose GEMM sums exactly, and declined elsewhere with a warning, serving float32
(``kernels.int8.int8_serving_reason``). It can change a fill (MODEL.md, "Evaluation", serving options).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from edit_engine import kernels
from edit_engine.model.dtypes import AUTO, DTYPE_ENV, DTYPES, is_auto, parse_dtype, serving_dtype  # noqa: F401  (re-exported)
from edit_engine.model.interfaces import Checkpoint, CheckpointError  # noqa: F401  (re-exported)
from edit_engine.model.network import DiffusionLM, ModelConfig
from edit_engine.model.tokenizer import Tokenizer

log = logging.getLogger("edit_engine")

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "models" / "default"
EDIT_DIR = Path(__file__).resolve().parents[1] / "models" / "edit"  # the next-edit model packaged beside it
FILES = ("config.json", "model.safetensors", "tokenizer.json")


def save(
    path: str | Path,
    model: DiffusionLM,
    tokenizer: Tokenizer,
    record: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> Path:
    if model.int8:
        raise ValueError("an int8-quantized model is for serving; save the float weights it was loaded from")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "edit-engine-mdlm", **model.cfg.to_dict()}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    tmp = out / "model.safetensors.tmp"
    save_file(state, str(tmp))
    tmp.replace(out / "model.safetensors")
    tokenizer.save(out / "tokenizer.json")
    if record is not None:
        (out / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    return out


# ``auto``'s check before it serves a faster dtype: the share of probe slots whose first-pass arg-max matches
# float32's. bf16 on the avx512_bf16 EPYC left 882 of 1,033 HumanEval fills identical and the score level
# (docs/results-archive-2026-12-05.md); a path whose arithmetic is broken on some CPU falls far below this.
AUTO_AGREEMENT = 0.9


def probe_agreement(model: DiffusionLM, reference: DiffusionLM, tok: Tokenizer) -> float:
    """The share of slots where ``model`` and ``reference`` pick the same token on a first pass (every slot
    masked) over three holes of a fixed probe text (this module's source)."""
    ids = tok.encode(Path(__file__).read_text(encoding="utf-8"))
    same = total = 0
    for at in (300, 900, 1500):
        prefix, suffix = ids[max(0, at - 256) : at], ids[at + 24 : at + 120]
        picks = []
        for m in (model, reference):
            cache = m.encode_context([prefix], [suffix], 24)
            canvas = torch.full((1, 24), tok.mask_id, dtype=torch.long, device=m.device)
            picks.append(m.canvas_logits(canvas, cache).float().argmax(-1).cpu())
        same += int((picks[0] == picks[1]).sum())
        total += picks[0].numel()
    return same / total


def _checked_auto(model: DiffusionLM, state: dict[str, torch.Tensor], cfg: ModelConfig, tok: Tokenizer,
                  device: str | torch.device) -> DiffusionLM:
    """``model`` (the ``auto`` dtype's) when it agrees with float32 on the probe (``AUTO_AGREEMENT``), else the
    float32 model, with a warning."""
    reference = DiffusionLM(cfg)
    reference.load_state_dict({k: v.float() for k, v in state.items()})
    reference.to(device=device).eval().requires_grad_(False)
    agree = probe_agreement(model, reference, tok)
    if agree >= AUTO_AGREEMENT:
        log.info("dtype auto: %s (agrees with float32 on %.0f%% of the probe)", model.embed.weight.dtype, agree * 100)
        return model
    log.warning("dtype auto: %s agrees with float32 on only %.0f%% of the probe (needs %.0f%%); serving float32",
                model.embed.weight.dtype, agree * 100, AUTO_AGREEMENT * 100)
    return reference


def load(
    path: str | Path | None = None, device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None
) -> Checkpoint:
    """Load a checkpoint directory (default: the packaged model). ``dtype``: what the model computes in (a dtype
    or its name); None = ``EDIT_ENGINE_DTYPE``, else the family's default (float32 for ours)."""
    from edit_engine.model import (
        hf,  # open checkpoints (Dream, LLaDA, ...): a config.json that is not ours, or a hub id
    )

    if hf.is_open_checkpoint(path):
        assert path is not None
        return hf.load(path, device=device, dtype=dtype)
    auto = is_auto(dtype)
    try:
        dtype = serving_dtype(dtype, AUTO, device)
    except ValueError as e:
        raise CheckpointError(str(e)) from e
    d = Path(path) if path is not None else DEFAULT_DIR
    if not d.is_dir():
        raise CheckpointError(f"model path {str(d)!r} is not a directory")
    missing = [f for f in FILES if not (d / f).is_file()]
    if missing:
        raise CheckpointError(f"model directory {str(d)!r} lacks {', '.join(missing)}")
    try:
        raw = json.loads((d / "config.json").read_text())
        cfg = ModelConfig.from_dict(raw)
        tok = Tokenizer.from_file(d / "tokenizer.json")
        state = load_file(str(d / "model.safetensors"))
    except Exception as e:  # malformed JSON, truncated safetensors, bad tokenizer
        raise CheckpointError(f"cannot read model in {str(d)!r}: {e}") from e
    if tok.vocab_size > cfg.vocab_size:
        raise CheckpointError(f"tokenizer has {tok.vocab_size} tokens but the model only {cfg.vocab_size}")
    int8 = dtype == torch.int8
    if int8 and torch.device(device).type != "cpu":
        raise CheckpointError(f"int8 serving runs on the CPU, not on {device}; use bf16 on a GPU")
    if int8 and (why := kernels.int8.int8_serving_reason()):
        log.warning("int8 declined, serving float32: %s", why)
        int8, dtype = False, torch.float32
    dtype = torch.float32 if int8 else dtype  # int8: quantized from float32 below
    model = DiffusionLM(cfg)
    try:
        model.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    except RuntimeError as e:
        raise CheckpointError(f"weights in {str(d)!r} do not match config.json: {e}") from e
    # Served, never trained here: no parameter asks autograd for a gradient, so no pass records a graph and the
    # kernels' dispatcher (kernels.dispatch.needs_grad) can pick the Triton kernels on a GPU.
    model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    if int8:
        model.quantize_int8()
    if auto and dtype != torch.float32:
        model = _checked_auto(model, state, cfg, tok, device)
    rec: dict[str, Any] = {}
    if (d / "training.json").is_file():
        try:
            rec = json.loads((d / "training.json").read_text())
        except ValueError:
            rec = {}
    return Checkpoint(model, tok, d, rec)
