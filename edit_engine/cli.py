"""The ``edit-engine`` command: infill, train, and the front ends (serve, lsp) when installed.

Each subcommand parses its flags, makes one call into the library, and prints the result. Errors a user can
cause (missing file, position outside the file, unreadable model) end with a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def spread_arg(text: str) -> int:
    """``--spread R``: the radius, checked by ``sampler.spread_radius`` (a usage error, not a traceback)."""
    from .sampler import spread_radius

    try:
        return spread_radius(int(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e) if text.strip().lstrip("-").isdigit() else
                                         f"expected an integer, got {text!r}") from None


def _float_arg(text: str, ok: Callable[[float], bool], want: str) -> float:
    """A number flag: ``text`` as a float, or a usage error naming what ``ok`` wants (not a traceback)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not ok(v):
        raise argparse.ArgumentTypeError(f"give {want}; got {text}")
    return v


def dtype_arg(text: str) -> str:
    """``--dtype NAME``: a serving dtype's name, checked by ``checkpoint.parse_dtype`` (a usage error)."""
    from .checkpoint import parse_dtype

    try:
        parse_dtype(text, "--dtype")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text.strip().lower()


def add_dtype_arg(p: argparse.ArgumentParser) -> None:
    """``--dtype``, shared by the commands that load a model to serve it (infill, eval, bench, lsp)."""
    p.add_argument("--dtype", type=dtype_arg, metavar="NAME",
                   help="what the model computes in: float32, bfloat16 or int8 (bf16: faster on CPUs with avx512_bf16 "
                   "or AMX, slower without them; int8: int8 linear layers, CPU only, faster than float32 on x86 CPUs; "
                   "either can change a fill; default: EDIT_ENGINE_DTYPE, else float32)")


def pad_threshold_arg(text: str) -> float:
    """``--pad-threshold T``: the length rule's threshold, 0 <= T <= 1 (``SamplerConfig.pad_threshold``)."""
    return _float_arg(text, lambda v: 0.0 <= v <= 1.0, "a probability, 0 <= T <= 1 (0 = pads slot by slot)")


def floor_ramp_arg(text: str) -> int:
    """``--floor-ramp R``: the floor's first-pass size, an integer >= 0 (0 = off; ``SamplerConfig.floor_ramp``)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"give 0 (off) or a first-pass floor >= 1; got {text}")
    return v


def add_sampler_args(p: argparse.ArgumentParser) -> None:
    """The sampler flags ``infill`` and ``eval`` share: --spread/--no-spread, --remask, --pad-threshold,
    --floor-ramp and --novel-penalty (each None unless given, so the model's sampler.json holds)."""
    p.add_argument("--spread", type=spread_arg, default=None, metavar="R",
                   help="no two tokens the floor commits in one pass lie within R slots of each other (0-8; "
                   "default: the model's sampler.json)")
    p.add_argument("--no-spread", dest="spread", action="store_const", const=0, help="the plain floor")
    p.add_argument("--remask", type=remask_arg, metavar="P",
                   help="self-correction: remask committed tokens whose probability falls below P (models trained "
                   "with --corrupt; 0 = off; default: the model's sampler.json)")
    p.add_argument("--pad-threshold", type=pad_threshold_arg, metavar="T",
                   help="length rule: the fill ends at the first slot whose pad probability reaches T (lower: "
                   "shorter fills; default: the model's sampler.json, else 0.5)")
    p.add_argument("--floor-ramp", type=floor_ramp_arg, metavar="R",
                   help="the floor ramps up over the first passes: R slots, then 2R, 4R, ... up to --min-commit "
                   "(0 = off; default: the model's sampler.json)")
    p.add_argument("--novel-penalty", type=novel_penalty_arg, metavar="P",
                   help="take P off the logit of every name that occurs nowhere in the context and is not a common "
                   "word of the language (0 = off; default: the model's sampler.json)")


def novel_penalty_arg(text: str) -> float:
    """``--novel-penalty P``: a logit penalty, 0 <= P <= 100 (0 = off; ``SamplerConfig.novel_penalty``)."""
    return _float_arg(text, lambda v: 0.0 <= v <= 100.0, "a logit penalty, 0 <= P <= 100 (0 = off)")


def remask_arg(text: str) -> float:
    """``--remask P``: a probability, 0 <= P < 1 (0 = off), as ``SamplerConfig.remask`` takes it."""
    return _float_arg(text, lambda v: 0.0 <= v < 1.0, "a probability, 0 <= P < 1 (0 = off)")


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit code 2."""


def _command(name: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    def deco(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        _COMMANDS[name] = fn
        return fn

    return deco


# ---------------------------------------------------------------------------------------------------- infill
def _add_infill(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("infill", help="fill at a cursor position of a file and print the fill")
    p.add_argument("file", help="source file")
    p.add_argument("--line", type=int, required=True, help="1-based line of the cursor")
    p.add_argument("--col", type=int, required=True, help="1-based column of the cursor, in characters")
    p.add_argument("--end-line", type=int, help="1-based end line of a selection to rewrite")
    p.add_argument("--end-col", type=int, help="1-based end column of a selection (exclusive)")
    p.add_argument("--language", help="language id (default: from the file extension)")
    p.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    add_dtype_arg(p)
    p.add_argument("--max-tokens", type=int, help="longest fill in tokens")
    p.add_argument("--threshold", type=float, help="confidence needed to commit a token in parallel")
    p.add_argument("--min-commit", type=int, help="commit at least this many tokens per pass (default: the "
                   "model's sampler.json, else 1)")
    add_sampler_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--stream", action="store_true", help="print every refinement pass as it comes")
    p.add_argument("--mode", choices=("insert", "rewrite"), default="insert",
                   help="rewrite: refine the selected text instead of filling it from scratch")
    p.add_argument("--no-repair", action="store_true", help="skip re-masking fills that do not parse")


@_command("infill")
def _infill(a: argparse.Namespace) -> int:
    from .engine import Engine, language_for_path
    from .positions import offset_of_line_col
    from .sampler import set_overrides

    path = Path(a.file)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {a.file}: {e.strerror or e}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{a.file} is not valid UTF-8 (byte {e.start})") from e
    try:
        offset = offset_of_line_col(text, a.line, a.col)
        selection = None
        if a.end_line is not None or a.end_col is not None:
            if a.end_line is None or a.end_col is None:
                raise UserError("--end-line and --end-col go together")
            end = offset_of_line_col(text, a.end_line, a.end_col)
            if end < offset:
                raise UserError("the selection ends before it starts")
            selection = (offset, end)
    except ValueError as e:
        raise UserError(str(e)) from e
    engine = Engine.load(a.model, dtype=a.dtype)
    overrides = set_overrides(threshold=a.threshold, temperature=a.temperature, min_commit=a.min_commit,
                              spread=a.spread, remask=a.remask, pad_threshold=a.pad_threshold,
                              floor_ramp=a.floor_ramp, novel_penalty=a.novel_penalty)
    lang = a.language or language_for_path(path)
    kw = dict(language=lang, selection=selection, max_tokens=a.max_tokens, seed=a.seed, mode=a.mode,
              repair=not a.no_repair, **overrides)
    if a.stream and not a.json:
        result = None
        for p in engine.stream_complete(text, offset, **kw):  # type: ignore[arg-type]
            tag = "final" if p.final else f"{p.masked} masked"
            print(f"--- pass {p.index} ({tag})\n{p.text}", flush=True)
            result = p
        assert result is not None
        return 0
    r = engine.complete(text, offset, **kw)  # type: ignore[arg-type]
    if a.json:
        print(json.dumps(r.to_json(text)))
    else:
        sys.stdout.write(r.text + ("" if r.text.endswith("\n") else "\n"))
    return 0


# ---------------------------------------------------------------------------------------------------- train
def _add_train(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("train", help="train a model (masked diffusion on infill-shaped examples)")
    p.add_argument("--out", required=True, help="output directory (resume state, checkpoint/, log.jsonl)")
    p.add_argument("--corpus", nargs="*", default=[], help="source roots (default: stdlib + site-packages)")
    p.add_argument("--extra-corpus", nargs="*", default=[], metavar="DIR",
                   help="extra source roots sampled at --extra-share of the training draws (e.g. the folder "
                        "scripts/algorithm_corpus.sh makes); never validated on")
    p.add_argument("--extra-share", type=float, default=0.0, metavar="F",
                   help="share (0-1) of training draws from --extra-corpus (default 0)")
    p.add_argument("--function-share", type=float, default=0.0, metavar="F",
                   help="share (0-1) of training file reads cut to one function, dedented, as a file of its own "
                        "(short contexts that start at a def; default 0)")
    p.add_argument("--preset", default="small", help="model preset: tiny, small, mid, base, large")
    p.add_argument("--minutes", type=float, default=0.0, help="wall-clock budget of this run")
    p.add_argument("--steps", type=int, default=0, help="optimizer steps of this run")
    p.add_argument("--schedule-minutes", type=float, default=0.0,
                   help="total minutes the LR schedule spans across resumed runs (default: --minutes)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast: on CUDA, and on CPUs with AMX (lscpu: amx_bf16), "
                   "where with --compile it trains 2.9x faster; slower than fp32 elsewhere")
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
    p.add_argument("--train-prefix", type=int, default=256, help="prefix tokens per training example; also the checkpoint's serving context (config.json max_prefix)")
    p.add_argument("--train-suffix", type=int, default=96, help="suffix tokens per training example; also the serving context's max_suffix")
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--eval-every", type=float, default=10.0, help="minutes between validation evaluations")
    p.add_argument("--save-every", type=float, default=5.0, help="minutes between resume checkpoints")
    p.add_argument("--holes-per-window", type=int, default=0, metavar="K",
                   help="holes per training row sharing one prefix (edit_engine/train/windows.py; default 4 "
                        "for diffusion, 1 for --objective ar; 1 = one hole per row)")
    p.add_argument("--window-span", type=int, default=64, metavar="TOKENS",
                   help="with --holes-per-window K > 1: the holes start within about this many tokens (default 64)")
    p.add_argument("--pretrain-share", type=float, default=0.0, metavar="F",
                   help="train the first F (0-1) of the schedule on long spans of running text (a full canvas, "
                        "128 slots for small and mid) before editor-shaped holes (docs/training.md; default 0)")
    p.add_argument("--corrupt", type=float, default=0.0, metavar="F",
                   help="self-correction: replace this share (0-1) of the visible canvas tokens with wrong ones and "
                        "supervise every visible slot, so the sampler's --remask can undo bad drafts (default 0)")


@_command("train")
def _train(a: argparse.Namespace) -> int:
    from .train import TrainConfig, train

    if not a.minutes and not a.steps:
        raise UserError("give --minutes or --steps")
    if a.vocab_size and not 260 <= a.vocab_size <= 262_144:
        raise UserError(f"--vocab-size {a.vocab_size}: give 260 to 262144 (256 bytes and the special tokens at least)")
    try:  # TrainConfig checks the combinations (holes per row, pretraining share, objective) in one place
        cfg = TrainConfig(out=a.out, preset=a.preset, corpus=tuple(a.corpus),
                          extra_corpus=tuple(a.extra_corpus), extra_share=a.extra_share,
                          function_share=a.function_share, minutes=a.minutes, steps=a.steps,
                          schedule_minutes=a.schedule_minutes, batch_size=a.batch_size, lr=a.lr, threads=a.threads,
                          device=a.device, autocast_bf16=a.bf16, seed=a.seed, objective=a.objective,
                          workers=a.workers, tokenizer=a.tokenizer, train_prefix=a.train_prefix,
                          train_suffix=a.train_suffix, warmup_steps=a.warmup_steps, eval_every_min=a.eval_every,
                          save_every_min=a.save_every, init=a.init, vocab_size=a.vocab_size,
                          compile=a.compile, holes_per_window=a.holes_per_window, window_span=a.window_span,
                          pretrain_share=a.pretrain_share, corrupt=a.corrupt)
    except ValueError as e:
        raise UserError(f"train: {e}") from e
    train(cfg, resume=a.resume)
    return 0


# ---------------------------------------------------------------------------------------------------- main
_ADDERS: list[Callable[[argparse._SubParsersAction], None]] = [_add_infill, _add_train]  # type: ignore[type-arg]


def register(adder: Callable[[argparse._SubParsersAction], None]) -> None:  # type: ignore[type-arg]
    """Let another module add a subcommand (its handler registers with ``_command``)."""
    _ADDERS.append(adder)


def build_parser() -> argparse.ArgumentParser:
    from . import cli_extra  # noqa: F401  (registers eval, bench, serve, lsp)

    parser = argparse.ArgumentParser(prog="edit-engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in _ADDERS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        return _COMMANDS[a.command](a)
    except UserError as e:
        print(f"edit-engine: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        from .checkpoint import CheckpointError

        if isinstance(e, CheckpointError):
            print(f"edit-engine: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    # Run the imported module's main: subcommands registered by cli_extra live in that module, not in __main__.
    from edit_engine.cli import main as _main

    sys.exit(_main())
