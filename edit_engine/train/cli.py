"""``edit-engine train``: the subcommand's flags and handler.

``add_parser(sub)`` adds the ``train`` parser to the ``edit-engine`` subparsers and sets its handler
(``handler=run``). Torch and the training loop are imported inside ``run``, so ``edit-engine --help`` stays fast.
Usage errors raise ``cli.args.UserError`` (one line on stderr, exit code 2).
"""

from __future__ import annotations

import argparse

from edit_engine.cli.args import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``train`` subcommand to ``sub``; its handler is ``run``."""
    p = sub.add_parser("train", help="train a model (masked diffusion on infill-shaped examples)")
    p.add_argument("--out", required=True, help="output directory (resume state, checkpoint/, log.jsonl)")
    p.add_argument("--corpus", nargs="*", default=[], help="source roots (default: stdlib + site-packages)")
    p.add_argument("--extra-corpus", nargs="*", default=[], metavar="DIR",
                   help="extra source roots sampled at --extra-share of the training draws (e.g. the folder "
                        "benchmarks/algorithm_corpus.sh makes); never validated on")
    p.add_argument("--extra-share", type=float, default=0.0, metavar="F",
                   help="share (0-1) of training draws from --extra-corpus (default 0)")
    p.add_argument("--preset", default="small", help="model preset: tiny, small, mid, base, large")
    p.add_argument("--minutes", type=float, default=0.0, help="wall-clock budget of this run")
    p.add_argument("--steps", type=int, default=0, help="optimizer steps of this run")
    p.add_argument("--schedule-minutes", type=float, default=0.0,
                   help="total minutes the LR schedule spans across resumed runs (default: --minutes)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast: on CUDA, and on CPUs with AMX (lscpu: "
                   "amx_bf16), where with --compile it trains 2.9x faster; slower than fp32 elsewhere")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from OUT/resume.pt")
    p.add_argument("--init", default="", help="start from this checkpoint's weights and tokenizer (e.g. the "
                   "packaged model when its resume state is gone); fresh optimizer, step count continues")
    p.add_argument("--objective", default="diffusion", choices=("diffusion", "ar"),
                   help="diffusion (the infiller) or ar (the autoregressive baseline, same network and data)")
    p.add_argument("--workers", type=int, default=0, help="data-loader processes (0 = in the training process)")
    p.add_argument("--tokenizer", default="", help="reuse this tokenizer.json (default: train one on the corpus)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the training forward (1.1-1.2x in fp32; 1.9x with --bf16 on an AMX CPU; "
                        "about 40-70 s to compile)")
    p.add_argument("--vocab-size", type=int, default=0,
                   help="tokenizer and model vocabulary (default: the preset's, 8192 for small and mid)")
    p.add_argument("--train-prefix", type=int, default=256,
                   help="prefix tokens per training example; also the checkpoint's serving context "
                        "(config.json max_prefix)")
    p.add_argument("--train-suffix", type=int, default=96,
                   help="suffix tokens per training example; also the serving context's max_suffix")
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--eval-every", type=float, default=10.0, help="minutes between validation evaluations")
    p.add_argument("--save-every", type=float, default=5.0, help="minutes between resume checkpoints")
    p.add_argument("--holes-per-window", type=int, default=0, metavar="K",
                   help="holes per training row sharing one prefix (edit_engine/train/windows.py; default 4 "
                        "for diffusion, 1 for --objective ar; 1 = one hole per row)")
    p.add_argument("--window-span", type=int, default=64, metavar="TOKENS",
                   help="with --holes-per-window K > 1: the holes start within about this many tokens (default 64)")
    p.add_argument("--edits", nargs="+", default=[], metavar="DIR",
                   help="train the edit model on these folders of edit examples (python -m edit_engine.train.edits "
                        "--out DIR)")
    p.add_argument("--edit-share", type=float, default=0.0, metavar="F",
                   help="with --edits: the share of batches drawn from the edit examples (the rest infill)")
    p.add_argument("--edit-weights", nargs="+", type=float, default=[], metavar="W",
                   help="with --edits: each folder's share of the edit rows (default: by their example counts)")
    p.set_defaults(handler=run)


def run(a: argparse.Namespace) -> int:
    """Train as the parsed flags say; 0 when the run ends. Bad flag values raise ``UserError``."""
    from edit_engine.train.loop import TrainConfig, train

    if not a.minutes and not a.steps:
        raise UserError("give --minutes or --steps")
    if a.vocab_size and not 260 <= a.vocab_size <= 262_144:
        raise UserError(f"--vocab-size {a.vocab_size}: give 260 to 262144 (256 bytes and the special tokens at least)")
    try:  # TrainConfig checks the combinations (holes per row, extra share, objective) in one place
        cfg = TrainConfig(out=a.out, preset=a.preset, corpus=tuple(a.corpus),
                          extra_corpus=tuple(a.extra_corpus), extra_share=a.extra_share,
                          minutes=a.minutes, steps=a.steps,
                          schedule_minutes=a.schedule_minutes, batch_size=a.batch_size, lr=a.lr, threads=a.threads,
                          device=a.device, autocast_bf16=a.bf16, seed=a.seed, objective=a.objective,
                          workers=a.workers, tokenizer=a.tokenizer, train_prefix=a.train_prefix,
                          train_suffix=a.train_suffix, warmup_steps=a.warmup_steps, eval_every_min=a.eval_every,
                          save_every_min=a.save_every, init=a.init, vocab_size=a.vocab_size,
                          compile=a.compile, holes_per_window=a.holes_per_window, window_span=a.window_span,
                          edits=tuple(a.edits), edit_share=a.edit_share,
                          edit_weights=tuple(a.edit_weights))
    except ValueError as e:
        raise UserError(f"train: {e}") from e
    train(cfg, resume=a.resume)
    return 0
