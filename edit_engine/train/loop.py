"""``edit-engine train``: masked-diffusion training on infill-shaped examples, with checkpoints and resume.

Objective (MDLM, Sahoo et al. 2024, eq. 10; LLaDA, Nie et al. 2025, eq. 3): draw t ~ U(t_min, 1] per example,
mask each canvas slot with probability t, and minimise the cross-entropy on masked slots weighted by 1/t,
normalised by the number of canvas slots. Pad (empty) slots are ordinary targets: the canvas bucket is the
smallest that holds the hole (sometimes a larger one), so pads are a minority and cannot swamp the loss, and the
model learns where a fill ends.

An auxiliary next-token loss on the causal prefix rows (weight ``ar_weight``) supervises every context token, so
the context representations the canvas reads are trained densely, not only through the few canvas slots.

``objective="ar"`` trains the autoregressive baseline instead (``edit_engine.decoding.ar``): the same network and the same
examples laid out as prefix-suffix-middle sequences, next-token loss on the middle plus ``ar_weight`` times the
loss on the prefix and suffix tokens.

On CUDA (``device="cuda"``, ``autocast_bf16``) batches come from ``workers`` data-loader processes, so the
tokenizer and hole sampling keep up with the GPU.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from edit_engine.model import checkpoint
from edit_engine.model.network import PRESETS, DiffusionLM, ModelConfig
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.train import corpus
from edit_engine.train.data import (
    MAX_HOLE,
    Batch,
    Example,
    SyntaxSpans,
    collate,
    collate_ar,
    make_example,
    syntax_spans,
)
from edit_engine.train.progress import Progress
from edit_engine.train.windows import Window, collate_windows, make_window, window_mask

DEFAULT_HOLES = 4  # holes per training row of the diffusion objective unless told otherwise


@dataclass(frozen=True)
class TrainConfig:
    out: str  # output directory: resume state, checkpoint, log
    preset: str = "small"  # model preset (edit_engine.model.network.PRESETS)
    corpus: tuple[str, ...] = ()  # source roots; empty = the standard library + site-packages
    # Extra source roots sampled at a fixed share of the training files (``corpus.mixed_weights``), e.g. the
    # small-function corpus of ``benchmarks/algorithm_corpus.sh``. Their held-out files are never trained on and
    # never validated on, so validation stays the same batches of the ordinary corpus in every run.
    extra_corpus: tuple[str, ...] = ()
    extra_share: float = 0.0  # 0 <= F < 1 of the training draws from ``extra_corpus`` (needs it when > 0)
    minutes: float = 0.0  # wall-clock budget of this run (0 = use steps)
    steps: int = 0  # optimizer steps of this run (0 = use minutes)
    batch_size: int = 16
    train_prefix: int = 256  # prefix tokens per example
    train_suffix: int = 96  # suffix tokens per example
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 200
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    ar_weight: float = 0.5
    schedule_minutes: float = 0.0  # total planned minutes across resumed runs for the LR schedule (0 = minutes)
    # Tokenizer and model vocabulary (0 = the preset's: 8,192 for small and mid). A trained tokenizer has this
    # many tokens; the model's embedding and tied head are sized to it (the tokenizer-size scaling runs).
    vocab_size: int = 0
    tokenizer_mb: float = 24.0  # megabytes of corpus text to train the tokenizer on
    seed: int = 0
    threads: int = 0  # torch threads (0 = leave torch's default)
    # bf16 autocast: on CUDA, and on CPUs with AMX (``cpu_precision_hint``): there, with ``compile``, 2.9x the
    # tokens/s of fp32 eager (docs/results-archive-2026-12-05.md, 2026-12-01, "training on an AMX CPU"). Much slower on CPUs without
    # bf16 arithmetic (docs/training.md, "Precision").
    autocast_bf16: bool = False
    save_every_min: float = 5.0
    eval_every_min: float = 10.0
    device: str = "cpu"
    objective: str = "diffusion"  # diffusion | ar (the autoregressive baseline, same network and data)
    workers: int = 0  # data-loader processes (0 = build batches in the training process)
    tokenizer: str = ""  # reuse this tokenizer.json instead of training one (e.g. the packaged model's)
    # torch.compile the full forward (dynamic shapes): 1.1-1.2x tokens/s on one fp32 CPU thread, same losses
    # (docs/results-archive-2026-12-05.md, 2026-11-30), about 40 s to compile
    compile: bool = False
    init: str = ""  # start from this checkpoint directory's weights and tokenizer (fresh optimizer; lineage kept)
    # Holes per training row (``train.windows``): >1 shares one causal prefix between that many holes whose
    # starts lie within about ``window_span`` tokens, so more of each step's tokens are diffusion targets.
    # Validation stays single-hole either way, so runs with different settings compare on the same batches.
    # 0 = the default: 4 for diffusion (better than 1 per row from scratch and warm-started, and level between 8
    # and 16 rows: docs/results-archive-2026-12-05.md, 2026-12-01), 1 for the AR baseline.
    holes_per_window: int = 0
    window_span: int = 64
    # The edit model (``train.edits``): a folder of edit examples and the share of batches drawn from them
    # (the rest are infill batches of the corpus). Its record says ``"task": "edit"``; next edits use it.
    edits: tuple[str, ...] = ()
    edit_share: float = 0.0
    edit_weights: tuple[float, ...] = ()  # each folder's share of the edit rows (empty: by their example counts)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.objective not in ("diffusion", "ar"):
            raise ValueError(f"objective={self.objective!r}; expected 'diffusion' or 'ar'")
        if self.holes_per_window == 0:  # the default for the objective (frozen: set through object)
            object.__setattr__(self, "holes_per_window", 1 if self.objective == "ar" else DEFAULT_HOLES)
        if self.holes_per_window < 1:
            raise ValueError(f"holes_per_window (--holes-per-window) {self.holes_per_window}: give 1 or more")
        if self.window_span < 1:
            raise ValueError(f"window_span (--window-span) {self.window_span}: give 1 or more tokens")
        if self.holes_per_window > 1 and self.objective == "ar":
            raise ValueError("holes_per_window (--holes-per-window) > 1 is a diffusion layout; the AR baseline "
                             "trains one hole per row")
        if not 0.0 <= self.extra_share < 1.0:
            raise ValueError(f"extra_share (--extra-share) {self.extra_share}: give a share of the training "
                             "draws, 0 <= F < 1")
        if 0.0 < self.extra_share < corpus.MIN_EXTRA_SHARE:
            raise ValueError(f"extra_share (--extra-share) {self.extra_share}: below "
                             f"{corpus.MIN_EXTRA_SHARE:g} the extra files would never be drawn; give 0 or more")
        if self.extra_share > 0 and not self.extra_corpus:
            raise ValueError("extra_share (--extra-share) needs extra_corpus (--extra-corpus DIR ...)")
        if not 0.0 <= self.edit_share <= 1.0:
            raise ValueError(f"edit_share (--edit-share) {self.edit_share}: give a share of the batches, 0 to 1")
        if bool(self.edits) != (self.edit_share > 0):
            raise ValueError("edits (--edits DIR ...) and edit_share (--edit-share F > 0) go together")
        if self.edit_weights and (len(self.edit_weights) != len(self.edits) or min(self.edit_weights) <= 0):
            raise ValueError("edit_weights (--edit-weights) takes one positive weight per --edits folder")
        if self.edits and self.objective != "diffusion":
            raise ValueError("edits (--edits) train the diffusion objective only")


# Validation: 8 fixed single-hole batches of this many examples from held-out files, whatever the run's batch
# size or layout, so runs compare on the same examples.
VAL_ROWS = 32
WINDOW_CHARS = 24_000  # longer files give a random window of this many characters (enough for any context)


class ExampleStream:
    """Random infill examples from corpus files (weighted by size, capped per package)."""

    def __init__(self, files: list[corpus.CorpusFile], tok: Tokenizer, cfg: TrainConfig, seed: int,
                 max_canvas: int = MAX_HOLE, per_file: int = 8, windows: bool = False,
                 canvas_pos: int = 256) -> None:
        self.files = files
        self.windows = windows and cfg.holes_per_window > 1
        if self.windows:  # the same holes per file read in both layouts (so as many files per batch of holes)
            per_file = max(1, per_file // cfg.holes_per_window)
        self.canvas_pos = canvas_pos  # the model's max_canvas (where suffix positions start)
        self.per_file = per_file
        self.weights = corpus.mixed_weights(files, cfg.extra_share)
        self.tok = tok
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.max_canvas = max_canvas
        self._file: tuple[str, SyntaxSpans | None] | None = None
        self._left = 0  # examples still to draw from the current file

    def next(self) -> Example:
        """An example; each file read (and parsed) gives ``per_file`` of them, so reading and parsing stay a
        small share of the work."""
        while True:
            text, spans = self._text()
            ex = make_example(self.tok, text, self.rng, self.cfg.train_prefix, self.cfg.train_suffix, spans=spans)
            if ex is not None:
                return ex

    def next_window(self) -> Window:
        """A window of ``holes_per_window`` holes (``train.windows``), drawn as ``next`` draws examples."""
        while True:
            text, spans = self._text()
            w = make_window(self.tok, text, self.rng, self.cfg.train_prefix, self.cfg.train_suffix,
                            self.cfg.holes_per_window, self.cfg.window_span, spans=spans,
                            max_hole=min(MAX_HOLE, self.max_canvas))
            if w is not None:
                return w

    def _text(self) -> tuple[str, SyntaxSpans | None]:
        """The current file's text and syntax units, reading the next file every ``per_file`` draws."""
        while True:
            if self._file is None or self._left <= 0:
                f = self.rng.choices(self.files, weights=self.weights)[0]
                text = corpus.read_text(f)
                if not text:
                    continue
                if len(text) > WINDOW_CHARS:  # a window of a long file, from a line start (parsing stays cheap)
                    a = self.rng.randrange(len(text) - WINDOW_CHARS)
                    a = text.rfind("\n", 0, a) + 1
                    text = text[a : a + WINDOW_CHARS]
                self._file = (text, syntax_spans(text))
                self._left = self.per_file
            self._left -= 1
            return self._file

    def batch(self, n: int) -> Batch:
        if self.windows:
            ws = [self.next_window() for _ in range(n)]
            return collate_windows(ws, self.tok, self.rng, self.canvas_pos, max_canvas=self.max_canvas)
        exs = [self.next() for _ in range(n)]
        if self.cfg.objective == "ar":
            return collate_ar(exs, self.tok)
        return collate(exs, self.tok, self.rng, max_canvas=self.max_canvas)


class _Batches(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Endless training batches for a DataLoader; each worker has its own seeded stream."""

    def __init__(self, files: list[corpus.CorpusFile], tok: Tokenizer, cfg: TrainConfig, seed: int,
                 max_canvas: int, canvas_pos: int) -> None:
        self.files, self.tok, self.cfg, self.seed, self.max_canvas = files, tok, cfg, seed, max_canvas
        self.canvas_pos = canvas_pos

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        wid = info.id if info is not None else 0
        torch.manual_seed(self.seed * 7919 + wid)  # collate draws its masks from torch's global generator
        torch.set_num_threads(1)
        stream = ExampleStream(self.files, self.tok, self.cfg, self.seed * 7919 + wid, self.max_canvas,
                               windows=True, canvas_pos=self.canvas_pos)
        while True:
            yield stream.batch(self.cfg.batch_size)


def losses(model: DiffusionLM, b: Batch, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(canvas diffusion loss, prefix next-token loss) of one batch; logits only for supervised rows."""
    tokens, kind = b.tokens.to(device), b.kind.to(device)
    if b.seg is not None and b.limit is not None and b.pos is not None:  # several holes per row
        mask = window_mask(kind, b.seg.to(device), b.limit.to(device))
        h = model(tokens, kind, mask, b.pos.to(device))  # (B, T, D)
    else:
        h = model(tokens, kind)  # (B, T, D)
    sel = b.targets.to(device) != -100
    logits = model.head(h[sel]).float()  # (N, V)
    ce = F.cross_entropy(logits, b.targets.to(device)[sel], reduction="none")
    diff = (ce * b.weights.to(device)[sel]).sum() / max(1, b.n_canvas)
    asel = b.ar_targets.to(device) != -100
    if bool(asel.any()):
        ar = F.cross_entropy(model.head(h[asel]).float(), b.ar_targets.to(device)[asel])
    else:
        ar = torch.zeros((), device=device)
    return diff, ar


@torch.no_grad()
def evaluate(model: DiffusionLM, batches: list[Batch], device: str) -> dict[str, float]:
    """Validation figures: diffusion loss, prefix next-token loss, masked-token CE (unweighted), and the
    context gap (masked-token CE with every example's context swapped for another's minus with its own)."""
    was_training = model.training
    model.eval()
    d_tot = a_tot = ce_real = ce_shuf = 0.0
    causal_only = model.cfg.objective == "ar"  # whole rows are one causal sequence: no context to swap
    for b in batches:
        d, a = losses(model, b, device)
        d_tot += float(d)
        a_tot += float(a)
        ce_real += _masked_ce(model, b, device)
        ce_shuf += float("nan") if causal_only else _masked_ce(model, _shuffle_context(b), device)
    model.train(was_training)
    n = len(batches)
    return {
        "val_diffusion": d_tot / n,
        "val_ar": a_tot / n,
        "val_masked_ce": ce_real / n,
        "val_masked_ce_shuffled": ce_shuf / n,
        "context_gap": (ce_shuf - ce_real) / n,
    }


def _masked_ce(model: DiffusionLM, b: Batch, device: str) -> float:
    h = model(b.tokens.to(device), b.kind.to(device))
    sel = b.targets.to(device) != -100
    return float(F.cross_entropy(model.head(h[sel]).float(), b.targets.to(device)[sel]))


def _shuffle_context(b: Batch) -> Batch:
    """Give every row the context (prefix and suffix columns) of the next row; keep its own canvas."""
    from edit_engine.model.network import CANVAS

    tokens, kind = b.tokens.clone(), b.kind.clone()
    ctx = b.kind != CANVAS
    rolled_t, rolled_k = b.tokens.roll(1, 0), b.kind.roll(1, 0)
    tokens[ctx] = rolled_t[ctx]
    kind[ctx] = rolled_k[ctx]
    return replace(b, tokens=tokens, kind=kind)


def lr_at(cfg: TrainConfig, step: int, progress: float) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    p = min(1.0, max(0.0, progress))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def _tokenizer(cfg: TrainConfig, files: list[corpus.CorpusFile], out: Path) -> Tokenizer:
    path = out / "tokenizer.json"
    if cfg.init:
        if cfg.tokenizer:
            raise SystemExit("--init brings its checkpoint's tokenizer; drop --tokenizer")
        src = Path(cfg.init) / "tokenizer.json"
        if path.is_file() and path.read_text() != src.read_text():
            raise SystemExit(f"{path} differs from {src}: use a fresh --out for a warm start")
        tok = Tokenizer.from_file(src)
        tok.save(path)
        return tok
    if cfg.tokenizer:
        tok = Tokenizer.from_file(cfg.tokenizer)
        tok.save(path)
        return tok
    if path.is_file():
        return Tokenizer.from_file(path)
    rng = random.Random(cfg.seed)
    pool = [f for f in files if f.split == "train"]
    weights = corpus.sampling_weights(pool)
    budget = int(cfg.tokenizer_mb * 1e6)
    texts: list[str] = []
    got = 0
    while got < budget:
        t = corpus.read_text(rng.choices(pool, weights=weights)[0])
        if t:
            texts.append(t)
            got += len(t)
    tok = Tokenizer.train(texts, vocab_size=cfg.vocab_size or PRESETS[cfg.preset].vocab_size)
    tok.save(path)
    return tok


def _warm_start(model: DiffusionLM, cfg: TrainConfig) -> tuple[int, int, float, list[dict[str, Any]],
                                                                 list[dict[str, Any]]]:
    """Load ``cfg.init``'s weights into ``model``; return its step, tokens, minutes, history and lineage."""
    ck = checkpoint.load(cfg.init, device=cfg.device, dtype=torch.float32)  # float32 master weights, whatever EDIT_ENGINE_DTYPE says
    # The serving context follows this run's train_prefix / train_suffix; the objective may change (an AR baseline
    # warm-started from the infiller's weights: the same network, trained causally from there).
    serving = ("max_prefix", "max_suffix", "objective")
    if {k: v for k, v in ck.model.cfg.to_dict().items() if k not in serving} != \
            {k: v for k, v in model.cfg.to_dict().items() if k not in serving}:
        raise SystemExit(f"--init {cfg.init}: its model config differs from preset {cfg.preset!r}")
    model.load_state_dict(ck.model.state_dict())
    rec = _record(Path(cfg.init))
    return (int(rec.get("step", 0)), int(rec.get("tokens_seen", 0)), float(rec.get("wall_minutes", 0.0)) * 60,
            list(rec.get("history", [])), list(rec.get("lineage", [])))


def _record(ckpt: Path) -> dict[str, Any]:
    """A checkpoint directory's training record (``training.json``), or {} without one."""
    path = ckpt / "training.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _log(out: Path, row: dict[str, Any]) -> None:
    with open(out / "log.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def cpu_has_amx() -> bool:
    """Whether this CPU multiplies bf16 matrices in AMX tiles (Sapphire Rapids and later): there bf16 autocast
    is fast; without AMX it is slower than fp32."""
    try:
        return bool(torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):  # a private helper: absent from older or other builds
        return False


def cpu_precision_hint(cfg: TrainConfig, amx: bool | None = None) -> str:
    """A line for stderr when the CPU run's precision does not suit this CPU, else ''."""
    if cfg.device != "cpu":
        return ""
    amx = cpu_has_amx() if amx is None else amx
    if amx and not cfg.autocast_bf16:
        return "note: this CPU has AMX: --bf16 --compile trains about 2.9x faster than fp32 here"
    if not amx and cfg.autocast_bf16:
        return "note: this CPU has no AMX: bf16 autocast is slower than fp32 here (about 18x without bf16 arithmetic)"
    return ""


def train(cfg: TrainConfig, resume: bool = False) -> Path:
    """Run training; returns the checkpoint directory (``out/checkpoint``)."""
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    hint = cpu_precision_hint(cfg)
    if hint:
        print(hint, file=sys.stderr, flush=True)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    data = _corpus(cfg)
    tok = _tokenizer(cfg, data.files, out)  # the ordinary corpus only (a warm start reuses its tokenizer anyway)
    mcfg, cfg = _model_config(cfg, tok, out)
    model, opt = _model_and_optimizer(cfg, mcfg, tok)
    progress = _start(cfg, out, model, opt, resume)
    max_canvas = min(MAX_HOLE, mcfg.max_canvas)
    val_batches = _val_batches(cfg, data.val_files, tok, max_canvas)
    batches = _train_batches(cfg, data.train_files, tok, cfg.seed * 1000 + progress.step, max_canvas,
                             mcfg.max_canvas)
    edit_val: list[Batch] = []
    if cfg.edits:
        batches, edit_val = _with_edits(cfg, tok, batches, cfg.seed * 1000 + progress.step, max_canvas)
    run = _Run(cfg, out, tok, model, opt, progress)  # this run's start (a resume or warm start carries earlier totals)
    model.train()
    run.record_base = _record_base(cfg, mcfg, model, data)
    run.edit_val = edit_val
    _loop(run, batches, val_batches)
    ev = _evaluate(run, val_batches)
    progress.history.append({"step": progress.step, "tokens": progress.tokens_seen,
                             "minutes": run.elapsed() / 60, **ev})
    _log(out, {"eval": True, **progress.history[-1]})
    _snapshot(run, final=True)
    print(f"done: step {progress.step}, {progress.tokens_seen:,} tokens; checkpoint in {out / 'checkpoint'}",
          file=sys.stderr)
    return out / "checkpoint"


@dataclass(frozen=True)
class _Corpus:
    """The run's source files: the ordinary corpus (which validates) and the extra one (``extra_corpus``)."""

    roots: list[Path]
    files: list[corpus.CorpusFile]
    extra_roots: list[Path]
    extra_files: list[corpus.CorpusFile]
    train_files: list[corpus.CorpusFile]  # both corpora's training split
    val_files: list[corpus.CorpusFile]  # the ordinary corpus: the same batches in every run


def _corpus(cfg: TrainConfig) -> _Corpus:
    roots = [Path(p) for p in cfg.corpus] or corpus.default_roots()
    files = corpus.list_files(roots)
    if not files:
        raise SystemExit(f"no .py files under {', '.join(map(str, roots))}")
    extra_roots = [Path(p) for p in cfg.extra_corpus]
    extra_files = corpus.list_files(extra_roots, extra=True) if extra_roots else []
    if extra_roots and not extra_files:
        raise SystemExit(f"no .py files under {', '.join(map(str, extra_roots))} (--extra-corpus)")
    return _Corpus(roots, files, extra_roots, extra_files,
                   train_files=[f for f in files + extra_files if f.split == "train"],
                   val_files=[f for f in files if f.split == "val"])


def _model_config(cfg: TrainConfig, tok: Tokenizer, out: Path) -> tuple[ModelConfig, TrainConfig]:
    """The model's config for this run, and ``cfg`` with the vocabulary size it uses filled in."""
    if cfg.vocab_size and tok.vocab_size != cfg.vocab_size:
        raise SystemExit(f"--vocab-size {cfg.vocab_size}: the tokenizer in use (--tokenizer, --init, or the one "
                         f"already in {out}) has {tok.vocab_size} tokens; use a fresh --out or drop --vocab-size")
    # The serving context is the one the rows were cut with: a model shown more prefix or suffix than it was trained
    # on reads tokens at positions it never saw (docs/results-archive-2026-12-05.md, 2026-12-03, "the trained context").
    mcfg = replace(PRESETS[cfg.preset], objective=cfg.objective, max_prefix=cfg.train_prefix,
                   max_suffix=cfg.train_suffix)
    if cfg.vocab_size:
        mcfg = replace(mcfg, vocab_size=cfg.vocab_size)
    else:  # the record (training.json "config") says which size the run used
        cfg = replace(cfg, vocab_size=mcfg.vocab_size)
    return mcfg, cfg


def _model_and_optimizer(cfg: TrainConfig, mcfg: ModelConfig, tok: Tokenizer,
                         ) -> tuple[DiffusionLM, torch.optim.Optimizer]:
    """A freshly initialised model (seeded by ``cfg.seed``; compiled with ``cfg.compile``) and its AdamW
    (weight decay on matrices only)."""
    if cfg.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if mcfg.vocab_size < tok.vocab_size:
        raise SystemExit(f"preset {cfg.preset} has vocab {mcfg.vocab_size} < tokenizer {tok.vocab_size}")
    torch.manual_seed(cfg.seed)
    model = DiffusionLM(mcfg).to(cfg.device)
    if cfg.compile:  # the instance's forward only: state_dict, checkpoints and the head are unchanged
        model.forward = torch.compile(model.forward, dynamic=True)  # type: ignore[method-assign]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95),
    )
    return model, opt


@dataclass
class _Progress:
    """How far training has come across resumed runs (what ``resume.pt`` keeps)."""

    step: int = 0
    tokens_seen: int = 0
    elapsed_prev: float = 0.0  # seconds trained before this run
    history: list[dict[str, Any]] = field(default_factory=list)  # validation figures
    lineage: list[dict[str, Any]] = field(default_factory=list)  # earlier runs' segments
    # (step, seconds) where this schedule's warmup and cosine start (a warm start moves it)
    origin: tuple[int, float] = (0, 0.0)
    resumed: bool = False


def _start(cfg: TrainConfig, out: Path, model: DiffusionLM, opt: torch.optim.Optimizer, resume: bool,
           ) -> _Progress:
    """Where this run starts: the saved state with ``resume`` (model and optimizer loaded), else ``cfg.init``'s
    weights and record (a fresh optimizer), else scratch."""
    state_path = out / "resume.pt"
    p = _Progress()
    if resume and state_path.is_file():
        st = torch.load(state_path, map_location=cfg.device, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        p.step, p.tokens_seen, p.elapsed_prev = st["step"], st["tokens_seen"], st["elapsed"]
        p.history = st.get("history", [])
        p.lineage = st.get("lineage") or list(_record(out / "checkpoint").get("lineage", []))  # older states
        p.resumed = True
        p.origin = tuple(st.get("origin", p.origin))  # type: ignore[assignment]
        print(f"resumed at step {p.step}, {p.tokens_seen:,} tokens, {p.elapsed_prev / 60:.1f} min", file=sys.stderr)
    elif cfg.init:
        p.step, p.tokens_seen, p.elapsed_prev, p.history, p.lineage = _warm_start(model, cfg)
        print(f"initialised from {cfg.init} (step {p.step}, {p.tokens_seen:,} tokens, {p.elapsed_prev / 60:.1f} "
              "min); fresh optimizer", file=sys.stderr)
        p.origin = (p.step, p.elapsed_prev)
    return p


def _val_batches(cfg: TrainConfig, val_files: list[corpus.CorpusFile], tok: Tokenizer,
                 max_canvas: int) -> list[Batch]:
    """The validation batches: the same examples and masks in every run, leaving torch's generator as it was."""
    val_stream = ExampleStream(val_files, tok, cfg, seed=12345, max_canvas=max_canvas)
    val_state = torch.random.get_rng_state()
    torch.manual_seed(12345)  # the validation batches' masks are the same in every run
    val_batches = [val_stream.batch(VAL_ROWS) for _ in range(8)]
    torch.random.set_rng_state(val_state)
    return val_batches


def _train_batches(cfg: TrainConfig, train_files: list[corpus.CorpusFile], tok: Tokenizer, seed: int,
                   max_canvas: int, canvas_pos: int) -> Iterator[Batch]:
    """Endless training batches from a stream seeded by ``seed``: from ``cfg.workers`` data-loader processes,
    or built in this process without workers."""
    if cfg.workers > 0:
        loader = torch.utils.data.DataLoader(
            _Batches(train_files, tok, cfg, seed, max_canvas, canvas_pos),
            batch_size=None, num_workers=cfg.workers, prefetch_factor=4, persistent_workers=True)
        return iter(loader)
    stream = ExampleStream(train_files, tok, cfg, seed=seed, max_canvas=max_canvas, windows=True,
                           canvas_pos=canvas_pos)
    return iter(lambda: stream.batch(cfg.batch_size), None)


def _with_edits(cfg: TrainConfig, tok: Tokenizer, infill: Iterator[Batch], seed: int, max_canvas: int,
                ) -> tuple[Iterator[Batch], list[Batch]]:
    """Training batches with ``cfg.edit_share`` of them drawn from the edit examples (single-hole layout), and
    8 fixed validation batches of the held-out edit examples."""
    from edit_engine.train import edits

    sets = [edits.split(edits.load(d)) for d in cfg.edits]
    train_sets = [t for t, _ in sets]
    val_ex = [e for _, v in sets for e in v]
    if not all(train_sets) or not val_ex:
        raise SystemExit(f"{cfg.edits}: too few edit examples ({[len(t) for t in train_sets]} to train, "
                         f"{len(val_ex)} to validate)")
    weights = list(cfg.edit_weights) or [len(t) for t in train_sets]
    rng = random.Random(seed)
    val_state = torch.random.get_rng_state()
    torch.manual_seed(12345)
    vr = random.Random(12345)
    val = [collate(vr.sample(val_ex, min(VAL_ROWS, len(val_ex))), tok, vr, max_canvas=max_canvas)
           for _ in range(8)]
    torch.random.set_rng_state(val_state)

    def mixed() -> Iterator[Batch]:
        while True:
            if rng.random() < cfg.edit_share:
                picks = rng.choices(train_sets, weights=weights, k=cfg.batch_size)
                yield collate([rng.choice(t) for t in picks], tok, rng, max_canvas=max_canvas)
            else:
                yield next(infill)

    return mixed(), val


def _evaluate(run: _Run, val_batches: list[Batch]) -> dict[str, float]:
    """``evaluate`` on the corpus's validation batches, and on the edit examples' (keys ``edit_...``)."""
    ev = evaluate(run.model, val_batches, run.cfg.device)
    if run.edit_val:
        ev.update({f"edit_{k}": v for k, v in evaluate(run.model, run.edit_val, run.cfg.device).items()
                   if k in ("val_diffusion", "val_masked_ce", "context_gap")})
    return ev


def _record_base(cfg: TrainConfig, mcfg: ModelConfig, model: DiffusionLM, data: _Corpus) -> dict[str, Any]:
    """The parts of the training record (``training.json``) that stay the same through the run."""
    record_base = {
        "command": " ".join(["edit-engine", "train", *sys.argv[2:]]) if len(sys.argv) > 1 else "",
        "config": asdict(cfg),
        "model": mcfg.to_dict(),
        "parameters": model.num_parameters(),
        "corpus": {"roots": [str(r) for r in data.roots], "files": len(data.files),
                   "train_files": len(data.train_files), "val_files": len(data.val_files),
                   "manifest": corpus.manifest_digest(data.files)},
    }
    if cfg.edits:
        record_base["task"] = "edit"
        record_base["edits"] = {"share": cfg.edit_share, "sets": [
            json.loads((Path(d) / "manifest.json").read_text()) if (Path(d) / "manifest.json").is_file() else d
            for d in cfg.edits]}
    extra_files = data.extra_files
    if extra_files:
        record_base["extra_corpus"] = {
            "roots": [str(r) for r in data.extra_roots], "share": cfg.extra_share, "files": len(extra_files),
            "train_files": sum(f.split == "train" for f in extra_files), "bytes": sum(f.size for f in extra_files),
            "manifest": corpus.manifest_digest(extra_files)}
    return record_base


@dataclass
class _Run:
    """One call of ``train``: what the loop steps and what a snapshot saves."""

    cfg: TrainConfig
    out: Path
    tok: Tokenizer
    model: DiffusionLM
    opt: torch.optim.Optimizer
    progress: _Progress
    t0: float = field(default_factory=time.time)  # when this run started
    start_step: int = field(init=False)  # the step this run started at
    tokens0: int = field(init=False)  # tokens seen when this run started
    record_base: dict[str, Any] = field(default_factory=dict)  # ``_record_base``
    edit_val: list[Batch] = field(default_factory=list)  # validation batches of edit examples (``cfg.edits``)

    def __post_init__(self) -> None:
        self.start_step, self.tokens0 = self.progress.step, self.progress.tokens_seen

    def elapsed(self) -> float:
        """Seconds trained in all, this run and the runs it resumes."""
        return self.progress.elapsed_prev + time.time() - self.t0


def _loop(run: _Run, batches: Iterator[Batch], val_batches: list[Batch]) -> None:
    """Step until ``cfg.steps`` steps or ``cfg.minutes`` have passed; log every 10 steps, validate every
    ``eval_every_min`` and snapshot every ``save_every_min`` minutes."""
    cfg, p = run.cfg, run.progress
    budget_s = cfg.minutes * 60 if cfg.minutes > 0 else float("inf")
    sched_s = (cfg.schedule_minutes or cfg.minutes) * 60
    last_save = last_eval = run.t0
    # a bar on a terminal; in a log, a plain line every half minute (train.progress)
    bar = Progress(run.start_step + cfg.steps if cfg.steps else None, "train", " steps", initial=run.start_step)
    while True:
        now = time.time()
        if cfg.steps and p.step - run.start_step >= cfg.steps:
            break
        if now - run.t0 >= budget_s:
            break
        progress = ((p.elapsed_prev + now - run.t0 - p.origin[1]) / sched_s if sched_s > 0
                    else ((p.step - p.origin[0]) / max(1, cfg.steps)))
        lr = lr_at(cfg, p.step - p.origin[0], progress)
        for g in run.opt.param_groups:
            g["lr"] = lr
        diff, ar, gn = _step(run, next(batches))
        el = run.elapsed()
        if p.step % 10 == 0:
            tps = (p.tokens_seen - run.tokens0) / max(time.time() - run.t0, 1e-9)  # this run's rate, compile included
            bar.update(p.step, f"loss {float(diff.detach()):.3f} ar {float(ar.detach()):.3f} gn {float(gn):.2f} "
                               f"lr {lr:.2e} {tps:,.0f} tok/s {el / 60:.1f} min")
            _log(run.out, {"step": p.step, "diff": float(diff.detach()), "ar": float(ar.detach()), "lr": lr,
                           "tokens": p.tokens_seen, "minutes": el / 60})
        if time.time() - last_eval >= cfg.eval_every_min * 60:
            ev = _evaluate(run, val_batches)
            p.history.append({"step": p.step, "tokens": p.tokens_seen, "minutes": el / 60, **ev})
            _log(run.out, {"eval": True, **p.history[-1]})
            bar.write(f"[eval] step {p.step} " + " ".join(f"{k}={v:.3f}" for k, v in ev.items()))
            last_eval = time.time()
        if time.time() - last_save >= cfg.save_every_min * 60:
            _snapshot(run)
            last_save = time.time()
    bar.update(p.step, bar.note)
    bar.close()


def _step(run: _Run, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One optimizer step on batch ``b``; returns its diffusion loss, prefix loss and gradient norm."""
    cfg, p = run.cfg, run.progress
    with torch.autocast("cpu" if cfg.device == "cpu" else "cuda", dtype=torch.bfloat16,
                        enabled=cfg.autocast_bf16):
        diff, ar = losses(run.model, b, cfg.device)
        loss = diff + cfg.ar_weight * ar
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
    run.opt.step()
    p.step += 1
    p.tokens_seen += int((b.kind != 0).sum())
    return diff, ar, gn


def _snapshot(run: _Run, final: bool = False) -> None:
    """Save the resume state (``resume.pt``, replaced whole) and the checkpoint with its training record, this
    run's segment added to the lineage."""
    cfg, p, out = run.cfg, run.progress, run.out
    elapsed = run.elapsed()
    segment = {"steps": f"{run.start_step}-{p.step}", "command": run.record_base["command"],
               "minutes": round((elapsed - p.elapsed_prev) / 60, 1), "tokens": p.tokens_seen,
               "start": ("init " + cfg.init if cfg.init and not p.resumed else
                         "resume" if p.resumed else "scratch")}
    lineage_now = [*p.lineage, segment]
    torch.save({"model": run.model.state_dict(), "opt": run.opt.state_dict(), "step": p.step,
                "tokens_seen": p.tokens_seen, "elapsed": elapsed, "history": p.history,
                "lineage": lineage_now, "origin": list(p.origin), "config": asdict(cfg)}, out / "resume.pt.tmp")
    os.replace(out / "resume.pt.tmp", out / "resume.pt")
    rec = {**run.record_base, "step": p.step, "tokens_seen": p.tokens_seen, "wall_minutes": elapsed / 60,
           "history": p.history, "final": final, "lineage": lineage_now}
    checkpoint.save(out / "checkpoint", run.model, run.tok, rec)
