"""The GPU pass against its floor: eager, CUDA graphs, launch floor, tokens/s at batch 1 (one short run).

For each canvas size of the packaged model (bf16 on a GPU) it times one denoising pass eager and replayed from a
CUDA graph captured for that size (the context cache's buffers and the canvas have static shapes and addresses,
so a captured pass replays as it is), and the launch floor: the same op sequence on a model of the same depth and
a width of 8 (eager: Python and launches; graph: the GPU's own launch cost). Then the fast sampler at batch 1 for
a span of 64, eager and with every pass replayed from a graph (tokens/s). Then an Open-dCoder-shaped model
(Qwen2.5-Coder-0.5B dimensions, random bf16 weights; nothing downloaded): a cached pass (canvas rows against a
fixed context's keys and values) and a full pass, eager and in a graph, and the tokens/s that the packaged
model's passes per token would give it, beside Mercury Coder Mini's published 1,109 tokens/s (H100).

    python benchmarks/gpu_pass.py --json runs/gpu_pass.json          # on a GPU: about 2 minutes
    python benchmarks/gpu_pass.py --device cpu --quick                # the CPU check of the script (no graphs)

Prints a table; ``--json PATH`` writes every figure. Nothing in the package depends on this script.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from edit_engine import Engine
from edit_engine.decoding.sampler import DenoiseState, pass_logits
from edit_engine.model import checkpoint
from edit_engine.model.hf.config import ArchConfig
from edit_engine.model.hf.fullattn import FullAttnLM, LayerWeights
from edit_engine.model.network import PRESETS, DiffusionLM

MERCURY_CODER_MINI_H100 = 1109.0  # tokens/s, Inception's published figure (Mercury Coder Mini, H100)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], dev: torch.device, reps: int) -> float:
    """Median milliseconds of ``fn`` over ``reps`` calls, each synchronised, after a warm-up."""
    for _ in range(3):
        fn()
    _sync(dev)
    xs = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        _sync(dev)
        xs.append((time.perf_counter() - t) * 1e3)
    return statistics.median(xs)


class Graphed:
    """``fn(static_input)`` captured in a CUDA graph: ``run(x)`` copies ``x`` into the static input and replays."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor) -> None:
        self.static_in = example.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the default stream (Triton compiles, allocator settles)
            for _ in range(3):
                fn(self.static_in)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_out = fn(self.static_in)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out


def pass_rows(model: Any, cache: Any, dev: torch.device, sizes: tuple[int, ...], reps: int, mask_id: int,
              graphs: bool) -> list[dict[str, Any]]:
    rows = []
    for c in sizes:
        canvas = torch.full((1, c), mask_id, dtype=torch.long, device=dev)
        row: dict[str, Any] = {"canvas": c, "eager_ms": timed(lambda x=canvas: model.canvas_logits(x, cache), dev,
                                                              reps)}
        if graphs:
            g = Graphed(lambda x: model.canvas_logits(x, cache), canvas)
            row["graph_ms"] = timed(lambda g=g, x=canvas: g.run(x), dev, reps)
        rows.append(row)
    return rows


def sampler_run(engine: Engine, cache: Any, span: int, dev: torch.device, graphs: dict[int, Graphed] | None,
                reps: int) -> dict[str, Any]:
    """The fast sampler's loop at batch 1 over a ``span``-slot canvas (every pass on that size); with ``graphs``
    each pass is a replay. Returns passes, real tokens and tokens/s (median run)."""
    tok = engine.tokenizer
    cfg = engine.sampler.with_(initial_canvas=span, max_tokens=span, min_tokens=span, pad_threshold=0.0,
                               floor_ramp=0, line_stop=False, novel_penalty=0.0)
    model = engine.model
    runs = []
    for _ in range(reps):
        _sync(dev)
        t = time.perf_counter()
        st = DenoiseState(cfg, tok.pad_id, tok.mask_id, dev, 1, None, 0, span)
        while True:
            if graphs is not None:
                if st.size not in graphs:  # a canvas size first met here: captured once, then replayed
                    graphs[st.size] = Graphed(lambda x: model.canvas_logits(x, cache), st.canvas)
                st.step(graphs[st.size].run(st.canvas).clone())
            else:
                st.step(pass_logits(model, st.canvas, st.masked, cache))
            step = st.advance(*st.stats().tolist())
            if step.final:
                break
        _sync(dev)
        ms = (time.perf_counter() - t) * 1e3
        real = int(((st.canvas != tok.pad_id) & (st.canvas != tok.mask_id)).sum())
        runs.append((ms, st.nfe, real))
    ms, nfe, real = sorted(runs)[len(runs) // 2]
    return {"span": span, "ms": ms, "passes": nfe, "tokens": real, "tokens_per_s": real / ms * 1e3,
            "passes_per_token": nfe / max(real, 1)}


def qwen_shaped(dev: torch.device, dtype: torch.dtype, quick: bool) -> FullAttnLM:
    """Qwen2.5-Coder-0.5B's shape (the Open-dCoder 0.5B base) with random weights; ``quick``: a tiny one."""
    d, layers, heads, kv, f, v = (896, 24, 14, 2, 4864, 151936) if not quick else (64, 2, 4, 2, 96, 512)
    hd = d // heads
    arch = ArchConfig(family="qwen2", weight_layout="hf", vocab_size=v, hidden_size=d, num_layers=layers,
                      num_heads=heads, num_kv_heads=kv, head_dim=hd, intermediate_size=f, rope_theta=1e6,
                      norm_eps=1e-6, shift_logits=True, tie_embeddings=True, max_positions=32768,
                      mask_token_id=v - 1, pad_token_id=v - 2, eos_token_id=v - 2, bos_token_id=None)
    g = torch.Generator(device="cpu").manual_seed(0)

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(dev, dtype)

    qkv = heads * hd + 2 * kv * hd
    lw = [LayerWeights(torch.ones(d, device=dev, dtype=dtype), w(qkv, d), w(qkv), w(d, heads * hd), None,
                       torch.ones(d, device=dev, dtype=dtype), w(2 * f, d), w(d, f)) for _ in range(layers)]
    embed = w(v, d)
    return FullAttnLM(arch, embed, lw, torch.ones(d, device=dev, dtype=dtype), embed, v)


def open_model_rows(dev: torch.device, quick: bool, graphs: bool, reps: int, ctx: int, span: int,
                    passes_per_token: float) -> dict[str, Any]:
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    m = qwen_shaped(dev, dtype, quick)
    c = m.cfg
    ctx_ids = torch.randint(0, c.vocab_size - 2, (1, ctx), device=dev)
    ctx_pos = torch.arange(ctx, device=dev).unsqueeze(0)
    kv: list[tuple[torch.Tensor, torch.Tensor]] = []

    def keep(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kv.append((k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    with torch.no_grad():
        m._stack(ctx_ids, ctx_pos, keep)  # the context's keys and values, computed once
    canvas_pos = torch.arange(ctx, ctx + span, device=dev).unsqueeze(0)
    full_pos = torch.arange(ctx + span, device=dev).unsqueeze(0)

    def cached(x: torch.Tensor) -> torch.Tensor:
        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            k0, v0 = kv[i]
            return torch.nn.functional.scaled_dot_product_attention(q, torch.cat([k0, k], 2), torch.cat([v0, v], 2),
                                                                    enable_gqa=True)
        with torch.no_grad():
            return m.head(m._stack(x, canvas_pos, attend))

    def full(x: torch.Tensor) -> torch.Tensor:
        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        with torch.no_grad():
            return m.head(m._stack(torch.cat([ctx_ids, x], 1), full_pos, attend)[:, ctx:])

    canvas = torch.full((1, span), c.vocab_size - 1, dtype=torch.long, device=dev)
    out: dict[str, Any] = {"parameters": c.num_parameters(), "dtype": str(dtype).replace("torch.", ""),
                           "context": ctx, "span": span}
    for name, fn in (("cached", cached), ("full", full)):
        out[f"{name}_eager_ms"] = timed(lambda fn=fn: fn(canvas), dev, reps)
        if graphs:
            g = Graphed(fn, canvas)
            out[f"{name}_graph_ms"] = timed(lambda g=g: g.run(canvas), dev, reps)
    best = min(v for k, v in out.items() if k.startswith("cached_") and k.endswith("_ms"))
    out["passes_per_token"] = passes_per_token
    out["tokens_per_s"] = 1e3 / (best * passes_per_token)
    out["tokens_per_s_one_token_per_pass"] = 1e3 / best
    out["mercury_coder_mini_h100_tokens_per_s"] = MERCURY_CODER_MINI_H100
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny shapes and few repetitions (the CPU check)")
    p.add_argument("--json", metavar="PATH", help="write every figure here")
    a = p.parse_args(argv)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --quick for the script's CPU check", file=sys.stderr)
        return 2
    graphs = dev.type == "cuda"
    reps = 5 if a.quick else 100
    sizes = (16, 64) if a.quick else (8, 16, 32, 64, 128)
    res: dict[str, Any] = {"machine": {"python": platform.python_version(), "torch": torch.__version__,
                                       "device": torch.cuda.get_device_name() if graphs else platform.processor()}}
    dtype = torch.bfloat16 if graphs else torch.float32
    engine = Engine.load(device=a.device, dtype=dtype)
    model, tok = engine.model, engine.tokenizer
    prefix = tok.encode(Path(checkpoint.__file__).read_text())[-256:]
    suffix = tok.encode(Path(__file__).read_text())[:96]
    cache = model.encode_context([prefix], [suffix], max(sizes))
    res["packaged"] = {"parameters": model.num_parameters(), "dtype": str(dtype).replace("torch.", ""),
                       "passes": pass_rows(model, cache, dev, sizes, reps, tok.mask_id, graphs)}
    # The launch floor: the packaged model's depth and op sequence at width 8 and a vocabulary of 64.
    floor_cfg = PRESETS["small"].__class__(**{**model.cfg.to_dict(), "d_model": 8, "n_heads": 2, "d_ff": 16,
                                              "vocab_size": 64})
    floor = DiffusionLM(floor_cfg).to(dev, dtype).eval().requires_grad_(False)
    floor_cache = floor.encode_context([[i % 60 + 3 for i in prefix]], [[i % 60 + 3 for i in suffix]], max(sizes))
    res["launch_floor"] = pass_rows(floor, floor_cache, dev, sizes, reps, 1, graphs)
    span = 64
    cache64 = model.encode_context([prefix], [suffix], span)
    eager = sampler_run(engine, cache64, span, dev, None, 3 if a.quick else 10)
    res["sampler_eager"] = eager
    if graphs:
        g = {span: Graphed(lambda x: model.canvas_logits(x, cache64), torch.full((1, span), tok.mask_id,
                                                                               dtype=torch.long, device=dev))}
        res["sampler_graph"] = sampler_run(engine, cache64, span, dev, g, 10)
    res["open_dcoder_shaped"] = open_model_rows(dev, a.quick, graphs, reps, 64 if a.quick else 512, span,
                                                eager["passes_per_token"])
    print(table(res))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


def table(r: dict[str, Any]) -> str:
    out = [f"device {r['machine']['device']}  torch {r['machine']['torch']}",
           f"packaged model ({r['packaged']['parameters'] / 1e6:.1f} M, {r['packaged']['dtype']}): one pass, ms",
           f"{'canvas':>8} {'eager':>8} {'graph':>8} {'floor eager':>12} {'floor graph':>12}"]
    for row, fl in zip(r["packaged"]["passes"], r["launch_floor"], strict=True):
        out.append(f"{row['canvas']:8d} {row['eager_ms']:8.3f} {row.get('graph_ms', float('nan')):8.3f} "
                   f"{fl['eager_ms']:12.3f} {fl.get('graph_ms', float('nan')):12.3f}")
    for name in ("sampler_eager", "sampler_graph"):
        if name in r:
            s = r[name]
            out.append(f"{name}: span {s['span']}, {s['passes']} passes, {s['tokens']} tokens in {s['ms']:.2f} ms: "
                       f"{s['tokens_per_s']:,.0f} tokens/s")
    o = r["open_dcoder_shaped"]
    out.append(f"Open-dCoder-shaped ({o['parameters'] / 1e6:.0f} M, {o['dtype']}, random weights), context "
               f"{o['context']}, span {o['span']}: " + ", ".join(f"{k} {v:.3f}" for k, v in o.items()
                                                               if k.endswith("_ms")))
    out.append(f"  at {o['passes_per_token']:.3f} passes per token: {o['tokens_per_s']:,.0f} tokens/s "
               f"(one token per pass: {o['tokens_per_s_one_token_per_pass']:,.0f}); Mercury Coder Mini on an H100: "
               f"{o['mercury_coder_mini_h100_tokens_per_s']:,.0f}")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
