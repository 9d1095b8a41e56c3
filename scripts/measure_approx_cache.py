"""How often does Fast-dLLM-style approximate caching change a fill? (edit_engine/hf/cache.py)

For each model and each random infill case (a random cut of a standard-library source file: up to
``--prefix`` tokens before, ``--suffix`` after), run the engine's sampler once with no cache (exact) and once per
(cache mode, refresh interval), and report the share of fills identical to the exact one, the share of canvas
slots that agree, the forward passes (nfe) and the query rows computed (the compute actually spent).

Models: ``--model FOLDER`` (any checkpoint edit-engine serves, e.g. a downloaded Dream-Coder; repeatable);
``--from-edit-engine CKPT`` converts one of our own trained checkpoints into a LLaMA-layout full-attention
folder (a trained-weights proxy; it was trained with our causal-prefix layout, so it is out of distribution under
full attention); ``--random`` (default when nothing else is given) builds tiny random-weight Dream-layout and
LLaDA-layout models. Random weights give near-uniform logits, where any perturbation flips an arg-max: a stress
test, not a quality figure.

Prints a table and writes JSON (``--out``). Example:
    python scripts/measure_approx_cache.py --random --from-edit-engine runs/small/checkpoint --cases 24
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edit_engine import hf  # noqa: E402
from edit_engine.hf.cache import CachePolicy  # noqa: E402
from edit_engine.sampler import SamplerConfig, denoise  # noqa: E402


def _corpus() -> list[str]:
    import argparse as m1
    import dataclasses as m4
    import json.decoder as m2
    import string as m5
    import textwrap as m3

    return [inspect.getsource(m) for m in (m1, m2, m3, m4, m5)]


def random_folder(d: Path, layout: str, seed: int) -> Path:
    """A tiny random-weight checkpoint in Dream (Qwen2 names, biases, shift) or LLaDA (OLMo names) layout."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    mask = "<|mask|>" if layout == "dream" else "<|mdm_mask|>"
    tok.train_from_iterator(_corpus(), trainers.BpeTrainer(
        vocab_size=1024, special_tokens=["<|endoftext|>", mask], min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    v, dm, f, layers, h, kv = tok.get_vocab_size(), 128, 352, 4, 4, 2
    hd = dm // h
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, std: float = 0.02) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    w: dict[str, torch.Tensor] = {}
    eos = tok.token_to_id("<|endoftext|>")
    if layout == "dream":
        w["model.embed_tokens.weight"] = rnd(v, dm)
        w["lm_head.weight"] = rnd(v, dm)
        w["model.norm.weight"] = torch.ones(dm)
        for i in range(layers):
            b = f"model.layers.{i}."
            for n, rows in (("q", h * hd), ("k", kv * hd), ("v", kv * hd)):
                w[b + f"self_attn.{n}_proj.weight"] = rnd(rows, dm)
                w[b + f"self_attn.{n}_proj.bias"] = rnd(rows, std=0.1)
            w[b + "self_attn.o_proj.weight"] = rnd(dm, h * hd)
            w[b + "mlp.gate_proj.weight"], w[b + "mlp.up_proj.weight"] = rnd(f, dm), rnd(f, dm)
            w[b + "mlp.down_proj.weight"] = rnd(dm, f)
            w[b + "input_layernorm.weight"] = torch.ones(dm)
            w[b + "post_attention_layernorm.weight"] = torch.ones(dm)
        cfg = {"architectures": ["DreamModel"], "model_type": "Dream", "hidden_size": dm, "intermediate_size": f,
               "num_hidden_layers": layers, "num_attention_heads": h, "num_key_value_heads": kv,
               "vocab_size": v, "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 2048,
               "tie_word_embeddings": False, "mask_token_id": tok.token_to_id(mask), "pad_token_id": eos,
               "eos_token_id": eos}
    else:
        w["model.transformer.wte.weight"] = rnd(v, dm)
        w["model.transformer.ff_out.weight"] = rnd(v, dm)
        w["model.transformer.ln_f.weight"] = torch.ones(dm)
        for i in range(layers):
            b = f"model.transformer.blocks.{i}."
            w[b + "q_proj.weight"], w[b + "k_proj.weight"] = rnd(h * hd, dm), rnd(kv * hd, dm)
            w[b + "v_proj.weight"], w[b + "attn_out.weight"] = rnd(kv * hd, dm), rnd(dm, h * hd)
            w[b + "ff_proj.weight"], w[b + "up_proj.weight"] = rnd(f, dm), rnd(f, dm)
            w[b + "ff_out.weight"] = rnd(dm, f)
            w[b + "attn_norm.weight"], w[b + "ff_norm.weight"] = torch.ones(dm), torch.ones(dm)
        cfg = {"architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": dm, "n_heads": h,
               "n_kv_heads": kv, "n_layers": layers, "mlp_hidden_size": f, "vocab_size": v, "embedding_size": v,
               "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "max_sequence_length": 2048, "block_type": "llama",
               "mask_token_id": tok.token_to_id(mask), "eos_token_id": eos, "pad_token_id": eos}
    d.mkdir(parents=True, exist_ok=True)
    save_file(w, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(cfg))
    tok.save(str(d / "tokenizer.json"))
    return d


def from_edit_engine(src: Path, d: Path) -> Path:
    """Our checkpoint (edit-engine-mdlm) rewritten as a LLaMA-layout diffusion folder (tied head, no shift)."""
    c = json.loads((src / "config.json").read_text())
    dm, h = int(c["d_model"]), int(c["n_heads"])
    w: dict[str, torch.Tensor] = {}
    with safe_open(str(src / "model.safetensors"), framework="pt") as f:
        get = f.get_tensor
        w["model.embed_tokens.weight"] = get("embed.weight")
        w["model.norm.weight"] = get("final_norm")
        for i in range(int(c["n_layers"])):
            b, s = f"model.layers.{i}.", f"blocks.{i}."
            q, k, v = get(s + "wqkv.weight").chunk(3, 0)
            w[b + "self_attn.q_proj.weight"], w[b + "self_attn.k_proj.weight"] = q, k
            w[b + "self_attn.v_proj.weight"] = v
            w[b + "self_attn.o_proj.weight"] = get(s + "wo.weight")
            gate, up = get(s + "w13.weight").chunk(2, 0)
            w[b + "mlp.gate_proj.weight"], w[b + "mlp.up_proj.weight"] = gate, up
            w[b + "mlp.down_proj.weight"] = get(s + "w2.weight")
            w[b + "input_layernorm.weight"] = get(s + "attn_norm")
            w[b + "post_attention_layernorm.weight"] = get(s + "mlp_norm")
    d.mkdir(parents=True, exist_ok=True)
    save_file({k: t.contiguous() for k, t in w.items()}, str(d / "model.safetensors"))
    tokj = json.loads((src / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tokj.get("added_tokens", [])}
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dm, "num_attention_heads": h,
        "num_key_value_heads": h, "num_hidden_layers": c["n_layers"], "intermediate_size": c["d_ff"],
        "vocab_size": c["vocab_size"], "rope_theta": c["rope_theta"], "rms_norm_eps": c["norm_eps"],
        "max_position_embeddings": 4096, "tie_word_embeddings": True, "mask_token_id": ids["<|mask|>"],
        "pad_token_id": ids["<|pad|>"], "eos_token_id": ids["<|eos|>"]}))
    (d / "tokenizer.json").write_text(json.dumps(tokj))
    return d


def cases(tok: hf.OpenTokenizer, n: int, max_prefix: int, max_suffix: int, seed: int) -> list[tuple[list[int],
                                                                                                     list[int]]]:
    rng = random.Random(seed)
    texts = _corpus()
    out = []
    for _ in range(n):
        t = rng.choice(texts)
        cut = rng.randrange(len(t) // 10, len(t) * 9 // 10)
        out.append((tok.encode(t[:cut])[-max_prefix:], tok.encode(t[cut:])[:max_suffix]))
    return out


def fill(model: hf.FullAttnLM, tok: hf.OpenTokenizer, pre: list[int], suf: list[int], cfg: SamplerConfig,
         pol: CachePolicy) -> tuple[list[int], int, int]:
    cache = model.encode_context([pre], [suf], cfg.max_tokens, pol)
    last = deque(denoise(model, cache, cfg, tok.pad_id, tok.mask_id), maxlen=1)[0]  # type: ignore[arg-type]
    return last.tokens.tolist(), last.nfe, cache.stats.rows


def measure(name: str, folder: Path, a: argparse.Namespace) -> list[dict[str, Any]]:
    model, tok, _, rec = hf.load_model(folder, "cpu", torch.float32)
    cfg = SamplerConfig(threshold=a.threshold, initial_canvas=a.initial_canvas, max_tokens=a.max_tokens)
    cs = cases(tok, a.cases, a.prefix, a.suffix, a.seed)
    policies = [CachePolicy("none", 1)] + [CachePolicy(m, r) for m in a.modes.split(",")
                                        for r in (int(x) for x in a.refresh.split(","))]
    results: dict[CachePolicy, dict[str, Any]] = {p: {"same": 0, "agree": 0.0, "nfe": 0, "rows": 0, "s": 0.0}
                                                  for p in policies}
    exact: list[list[int]] = []
    for p in policies:
        for i, (pre, suf) in enumerate(cs):
            t0 = time.perf_counter()
            toks, nfe, rows = fill(model, tok, pre, suf, cfg, p)
            r = results[p]
            r["s"] += time.perf_counter() - t0
            r["nfe"] += nfe
            r["rows"] += rows
            if p.mode == "none":
                exact.append(toks)
            ref = exact[i]
            r["same"] += int(toks == ref)
            n = max(len(toks), len(ref))
            r["agree"] += sum(x == y for x, y in zip(toks, ref, strict=False)) / n
    base_rows = results[policies[0]]["rows"]
    rows_out = []
    for p in policies:
        r = results[p]
        rows_out.append({"model": name, "family": rec["family"], "mode": p.mode, "refresh_every": p.refresh_every,
                         "cases": len(cs), "identical_share": r["same"] / len(cs),
                         "slot_agreement": r["agree"] / len(cs), "mean_nfe": r["nfe"] / len(cs),
                         "rows_vs_none": r["rows"] / base_rows, "cpu_s": round(r["s"], 2)})
    return rows_out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", default=[], help="checkpoint folder (repeatable)")
    p.add_argument("--from-edit-engine", help="one of our checkpoints, converted to a full-attention folder")
    p.add_argument("--random", action="store_true", help="tiny random-weight Dream and LLaDA layouts")
    p.add_argument("--cases", type=int, default=24)
    p.add_argument("--prefix", type=int, default=192, help="prefix tokens per case")
    p.add_argument("--suffix", type=int, default=64, help="suffix tokens per case")
    p.add_argument("--modes", default="prefix,dual")
    p.add_argument("--refresh", default="2,4,8,0", help="refresh intervals (0 = only when the canvas grows)")
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--initial-canvas", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="approx_cache.json", help="JSON output")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        todo: list[tuple[str, Path]] = [(Path(m).name, Path(m)) for m in a.model]
        if a.from_edit_engine:
            todo.append(("edit-engine-as-llama", from_edit_engine(Path(a.from_edit_engine), Path(tmp) / "ee")))
        if a.random or not todo:
            todo += [(f"random-{lay}", random_folder(Path(tmp) / lay, lay, a.seed)) for lay in ("dream", "llada")]
        for name, folder in todo:
            rows += measure(name, folder, a)
    head = f"{'model':<22}{'mode':<8}{'refresh':>8}{'identical':>11}{'slots':>8}{'nfe':>7}{'rows':>7}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<22}{r['mode']:<8}{r['refresh_every']:>8}{r['identical_share']:>11.3f}"
              f"{r['slot_agreement']:>8.3f}{r['mean_nfe']:>7.1f}{r['rows_vs_none']:>7.2f}")
    Path(a.out).write_text(json.dumps({"settings": vars(a), "results": rows}, indent=2) + "\n")
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
