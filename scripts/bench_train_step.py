"""Training throughput of the ``small`` preset, eager or with ``train --compile``'s compiled forward.

    OMP_NUM_THREADS=1 python scripts/bench_train_step.py eager & OMP_NUM_THREADS=1 python scripts/bench_train_step.py compile

Run the two side by side (one thread each) so that they share the machine's state. Each builds 24 batches of
16 examples (prefix 256, suffix 96 tokens: the CPU defaults) from the training split, runs 4 warm-up steps
(the compile happens there), then times 20 optimizer steps and prints tokens/s and seconds per step.
"""

from __future__ import annotations

import sys
import time

import torch


def main(argv: list[str]) -> int:
    if argv not in (["eager"], ["compile"]):
        print(__doc__, file=sys.stderr)
        return 2
    from edit_engine.model import PRESETS, DiffusionLM
    from edit_engine.tokenizer import Tokenizer
    from edit_engine.train import corpus
    from edit_engine.train.data import MAX_HOLE
    from edit_engine.train.loop import ExampleStream, TrainConfig, losses

    torch.set_num_threads(1)
    tok = Tokenizer.from_file("edit_engine/models/default/tokenizer.json")
    files = [f for f in corpus.list_files() if f.split == "train"]
    stream = ExampleStream(files, tok, TrainConfig(out="-", preset="small"), seed=1, max_canvas=MAX_HOLE)
    batches = [stream.batch(16) for _ in range(24)]
    torch.manual_seed(0)
    model = DiffusionLM(PRESETS["small"])
    if argv[0] == "compile":
        model.forward = torch.compile(model.forward, dynamic=True)  # type: ignore[method-assign]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = 0
    for i, b in enumerate(batches):
        if i == 4:
            t0, tokens = time.perf_counter(), 0
        d, a = losses(model, b, "cpu")
        opt.zero_grad()
        (d + 0.5 * a).backward()
        opt.step()
        tokens += int((b.kind != 0).sum())
    dt = time.perf_counter() - t0
    print(f"{argv[0]}: {tokens / dt:,.0f} tokens/s, {dt / (len(batches) - 4):.3f} s/step")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
