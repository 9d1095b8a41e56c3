"""Training throughput of a preset (default ``small``): eager or compiled, fp32 or bf16, one or several holes.

    OMP_NUM_THREADS=1 python scripts/bench_train_step.py eager & OMP_NUM_THREADS=1 python scripts/bench_train_step.py compile
    OMP_NUM_THREADS=1 python scripts/bench_train_step.py eager & \\
        OMP_NUM_THREADS=1 python scripts/bench_train_step.py eager --holes 4 --rows 8

Run two side by side (one thread each) so that they share the machine's state. Each builds 24 batches of
``--rows`` rows (default 16; prefix 256, suffix 96 tokens: the CPU defaults) from the training split, with
``--holes`` holes per row (``train.windows``; default 1, the single-hole layout) or, with ``--pretrain``, the
pretraining phase's long spans (``--pretrain-share``), runs 4 warm-up steps (the
compile happens there), then times 20 optimizer steps. It prints tokens/s, seconds per step, canvas slots and
masked (supervised) canvas slots per second, and the seconds spent building a batch (tokenizing and laying
out, which the training process does itself unless ``--workers`` is set).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("mode", choices=("eager", "compile"))
    p.add_argument("--holes", type=int, default=1, help="holes per row (1 = the single-hole layout)")
    p.add_argument("--rows", type=int, default=16, help="rows per batch")
    p.add_argument("--span", type=int, default=128, help="--window-span with --holes > 1")
    p.add_argument("--pretrain", action="store_true",
                   help="the pretraining phase's rows (--pretrain-share: long spans on a full 128-slot canvas)")
    p.add_argument("--corrupt", type=float, default=0.0, metavar="F",
                   help="self-correction rows (--corrupt F: wrong visible tokens, every visible slot supervised)")
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast (train --bf16): fast only on CPUs with AMX (lscpu: amx_bf16)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--preset", default="small", help="model preset (small, mid, ...)")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args(argv)
    from edit_engine.model import PRESETS, DiffusionLM
    from edit_engine.tokenizer import Tokenizer
    from edit_engine.train import corpus
    from edit_engine.train.data import MAX_HOLE
    from edit_engine.train.loop import ExampleStream, TrainConfig, losses

    torch.set_num_threads(a.threads)
    tok = Tokenizer.from_file("edit_engine/models/default/tokenizer.json")
    files = [f for f in corpus.list_files() if f.split == "train"]
    cfg = TrainConfig(out="-", preset=a.preset, holes_per_window=a.holes, window_span=a.span, corrupt=a.corrupt)
    stream = ExampleStream(files, tok, cfg, seed=1, max_canvas=MAX_HOLE, windows=True,
                           canvas_pos=PRESETS[a.preset].max_canvas, pretrain=a.pretrain, corrupt=a.corrupt)
    t_data = time.perf_counter()
    batches = [stream.batch(a.rows) for _ in range(24)]
    t_data = (time.perf_counter() - t_data) / len(batches)
    torch.manual_seed(0)
    model = DiffusionLM(PRESETS[a.preset])
    if a.mode == "compile":
        model.forward = torch.compile(model.forward, dynamic=True)  # type: ignore[method-assign]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = slots = masked = real = supervised = 0
    for i, b in enumerate(batches):
        if i == 4:
            t0, tokens, slots, masked, real, supervised = time.perf_counter(), 0, 0, 0, 0, 0
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            d, ar = losses(model, b, "cpu")
        opt.zero_grad()
        (d + 0.5 * ar).backward()
        opt.step()
        tokens += int((b.kind != 0).sum())
        slots += b.n_canvas
        on_mask = (b.targets != -100) & (b.tokens == tok.mask_id)  # masked slots (--corrupt also supervises others)
        masked += int(on_mask.sum())
        real += int((on_mask & (b.targets != tok.pad_id)).sum())  # masked slots that are not pads
        supervised += int((b.targets != -100).sum())
    dt = time.perf_counter() - t0
    steps = len(batches) - 4
    row = {"mode": a.mode, "holes": a.holes, "rows": a.rows, "pretrain": a.pretrain, "tokens_per_s": tokens / dt,
           "s_per_step": dt / steps, "canvas_slots_per_s": slots / dt, "masked_slots_per_s": masked / dt,
           "masked_token_slots_per_s": real / dt, "corrupt": a.corrupt,
           "supervised_slots_per_s": supervised / dt, "s_per_batch_built": t_data, "tokens_per_row": tokens / steps / a.rows,
           "bf16": a.bf16, "threads": a.threads, "preset": a.preset}
    what = ("pretrain spans" if a.pretrain else f"holes={a.holes}") + (f" corrupt={a.corrupt}" if a.corrupt else "")
    what += (" bf16" if a.bf16 else "") + f" threads={a.threads} preset={a.preset}"
    print(f"{a.mode} {what} rows={a.rows}: {row['tokens_per_s']:,.0f} tokens/s, {row['s_per_step']:.3f} s/step, "
          f"{row['canvas_slots_per_s']:,.0f} canvas slots/s, {row['masked_slots_per_s']:,.0f} masked slots/s "
          f"({row['masked_token_slots_per_s']:,.0f} not pads), "
          f"{row['tokens_per_row']:.0f} tokens/row, {t_data:.3f} s to build a batch")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
