"""``edit-engine train`` end to end on a small corpus: a run, a resume that continues it, and a warm start
(``--init``) from a checkpoint whose resume state is gone; its flags (``edit_engine.train.cli``); the canvas
layout of a training hole (``data.lay_canvas``)."""

from __future__ import annotations

import inspect
import json
import random
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.cli.main import main
from edit_engine.model import checkpoint
from edit_engine.model.network import CANVAS, PRESETS
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.train import cli as train_cli
from edit_engine.train import corpus, data

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    chunks = []
    for m in (random, json.decoder, json.encoder, textwrap, inspect):
        src = inspect.getsource(m)
        chunks += [src[j : j + 3000] for j in range(0, len(src), 3000) if len(src[j : j + 3000]) > 200]
    # Names chosen so that the path-hash split puts two files in validation and the rest in training.
    names = (f"part{k}.py" for k in range(10_000))
    val = [n for n in names if corpus.CorpusFile(Path(n), n, 0, "").split == "val"][:2]
    train = [n for n in (f"part{k}.py" for k in range(10_000)) if n not in val]
    for name, text in zip(val + train, chunks, strict=False):
        (d / name).write_text(text)
    return d


def _train(out: Path, corpus_dir: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    argv = ["train", "--out", str(out), "--corpus", str(corpus_dir), "--preset", "tiny", "--batch-size", "2",
            "--train-prefix", "48", "--train-suffix", "24", "--threads", "1", "--warmup-steps", "2", *extra]
    assert main(argv) == 0
    return json.loads((out / "checkpoint" / "training.json").read_text())


def test_train_resume_and_init(tmp_path: Path, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A small tokenizer: the tiny preset's vocabulary.
    from edit_engine.train import loop

    real = loop.TrainConfig.__init__

    def small_vocab(self: loop.TrainConfig, *a: object, **kw: object) -> None:
        kw.setdefault("vocab_size", PRESETS["tiny"].vocab_size)
        kw.setdefault("tokenizer_mb", 0.05)
        real(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(loop.TrainConfig, "__init__", small_vocab)

    run = tmp_path / "run"
    rec = _train(run, corpus_dir, "--steps", "3")
    assert rec["step"] == 3 and rec["final"] and rec["tokens_seen"] > 0
    assert rec["lineage"][-1]["steps"] == "0-3" and rec["lineage"][-1]["start"] == "scratch"
    assert rec["config"]["vocab_size"] == PRESETS["tiny"].vocab_size  # no --vocab-size: the preset's, recorded
    ck = checkpoint.load(run / "checkpoint")
    # The preset's network, served with the context its rows were cut with (--train-prefix / --train-suffix).
    assert ck.model.cfg.to_dict() == {**PRESETS["tiny"].to_dict(), "max_prefix": 48, "max_suffix": 24}

    rec = _train(run, corpus_dir, "--steps", "2", "--resume")
    assert rec["step"] == 5
    assert [seg["steps"] for seg in rec["lineage"]] == ["0-3", "3-5"]
    assert [seg["start"] for seg in rec["lineage"]] == ["scratch", "resume"]
    assert len(rec["history"]) == 2  # one validation row per run, kept across the resume

    # Warm start: the resume state is gone, only the (bf16) checkpoint is left.
    warm = tmp_path / "warm"
    before = checkpoint.load(run / "checkpoint").model.state_dict()
    rec = _train(warm, corpus_dir, "--steps", "1", "--init", str(run / "checkpoint"), "--lr", "0",
                 "--train-prefix", "32")  # a warm start may cut its rows differently: it serves what it trained on
    assert rec["step"] == 6 and rec["tokens_seen"] > 0
    assert [seg["steps"] for seg in rec["lineage"]] == ["0-3", "3-5", "5-6"]
    assert rec["lineage"][-1]["start"].startswith("init ")
    assert (warm / "tokenizer.json").read_text() == (run / "tokenizer.json").read_text()
    after_ck = checkpoint.load(warm / "checkpoint")
    assert (after_ck.model.cfg.max_prefix, after_ck.model.cfg.max_suffix) == (32, 24)
    after = after_ck.model.state_dict()
    for k, v in before.items():  # lr 0: the weights are exactly the ones it started from
        assert torch.equal(v, after[k]), k


def test_init_refuses_a_different_tokenizer(tmp_path: Path, corpus_dir: Path, tiny_checkpoint: Path) -> None:
    out = tmp_path / "x"
    out.mkdir()
    (out / "tokenizer.json").write_text("{}")
    with pytest.raises(SystemExit, match="differs"):
        main(["train", "--out", str(out), "--corpus", str(corpus_dir), "--preset", "tiny", "--steps", "1",
              "--init", str(tiny_checkpoint), "--threads", "1"])
    with pytest.raises(SystemExit, match="drop --tokenizer"):
        main(["train", "--out", str(tmp_path / "y"), "--corpus", str(corpus_dir), "--preset", "tiny", "--steps",
              "1", "--init", str(tiny_checkpoint), "--tokenizer", str(tiny_checkpoint / "tokenizer.json")])


def test_init_refuses_another_architecture(tmp_path: Path, corpus_dir: Path, tiny_checkpoint: Path) -> None:
    with pytest.raises(SystemExit, match="differs from preset"):
        main(["train", "--out", str(tmp_path / "x"), "--corpus", str(corpus_dir), "--preset", "small",
              "--steps", "1", "--init", str(tiny_checkpoint), "--threads", "1"])


def test_vocab_size_sizes_tokenizer_and_model(tmp_path: Path, corpus_dir: Path,
                                              monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    """``--vocab-size N`` (the tokenizer-size scaling runs): the trained tokenizer has N tokens and the model's
    embedding and tied head are N rows, whatever the preset's vocabulary; a size that cannot hold the bytes and
    special tokens is a usage error."""
    from edit_engine.model.tokenizer import Tokenizer
    from edit_engine.train import loop

    real = loop.TrainConfig.__init__

    def small_corpus(self: loop.TrainConfig, *a: object, **kw: object) -> None:
        kw.setdefault("tokenizer_mb", 0.05)
        real(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(loop.TrainConfig, "__init__", small_corpus)
    run = tmp_path / "v384"
    _train(run, corpus_dir, "--steps", "1", "--vocab-size", "384")
    assert Tokenizer.from_file(str(run / "tokenizer.json")).vocab_size == 384
    ck = checkpoint.load(run / "checkpoint")
    assert ck.model.cfg.vocab_size == 384 and ck.model.embed.weight.shape[0] == 384
    assert main(["train", "--out", str(tmp_path / "bad"), "--steps", "1", "--vocab-size", "100"]) == 2
    assert "--vocab-size 100" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="has 384 tokens"):  # a rerun in the same --out with another size
        _train(run, corpus_dir, "--steps", "1", "--vocab-size", "512")


def test_compiled_training_step_matches_eager(tmp_path: Path, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                              tiny_tokenizer: object) -> None:
    """``--compile``: the compiled forward gives the eager losses and gradients on the same weights and batch
    (float rounding; comparing whole runs would compare Adam's amplification of that rounding), and a
    compiled run trains and saves a checkpoint that loads as any other."""
    import random as _random

    from edit_engine.model.network import DiffusionLM
    from edit_engine.train import data, loop

    torch.manual_seed(0)
    model = DiffusionLM(PRESETS["tiny"])
    rng = _random.Random(0)
    ex = [data.Example([rng.randrange(3, 500) for _ in range(rng.randint(0, 20))],
                       [rng.randrange(3, 500) for _ in range(rng.randint(0, 12))],
                       [rng.randrange(3, 500) for _ in range(rng.randint(0, 10))], "x") for _ in range(4)]
    batch = data.collate(ex, tiny_tokenizer, rng, max_canvas=32)  # type: ignore[arg-type]

    def grads() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        d, a = loop.losses(model, batch, "cpu")
        (d + 0.5 * a).backward()
        return (d + 0.5 * a).detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    loss_e, g_e = grads()
    model.forward = torch.compile(model.forward, dynamic=True)  # type: ignore[method-assign]
    loss_c, g_c = grads()
    assert torch.allclose(loss_c, loss_e, rtol=1e-5, atol=1e-6)
    assert len(g_c) == len(g_e) and all(torch.allclose(c, e, rtol=1e-3, atol=1e-6) for c, e in zip(g_c, g_e, strict=True))

    real = loop.TrainConfig.__init__

    def small_vocab(self: loop.TrainConfig, *a: object, **kw: object) -> None:
        kw["vocab_size"] = kw.get("vocab_size") or PRESETS["tiny"].vocab_size
        kw.setdefault("tokenizer_mb", 0.05)
        real(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(loop.TrainConfig, "__init__", small_vocab)
    rec = _train(tmp_path / "comp", corpus_dir, "--steps", "2", "--compile")
    assert rec["config"]["compile"] and rec["step"] == 2 and rec["tokens_seen"] > 0
    assert checkpoint.load(tmp_path / "comp" / "checkpoint").model.cfg.vocab_size == PRESETS["tiny"].vocab_size


def test_holes_per_window_trains_and_validates_single_hole(tmp_path: Path, corpus_dir: Path) -> None:
    """``--holes-per-window 4``: training rows hold several holes (more canvas slots per row), validation
    batches stay single-hole (so runs with and without it compare on the same batches), and the run saves a
    checkpoint that loads."""
    from edit_engine.model.tokenizer import Tokenizer
    from edit_engine.train import loop

    rec = _train(tmp_path / "w", corpus_dir, "--steps", "3", "--holes-per-window", "4", "--window-span", "32")
    assert rec["config"]["holes_per_window"] == 4 and rec["step"] == 3
    assert checkpoint.load(tmp_path / "w" / "checkpoint").model.cfg.vocab_size == PRESETS["tiny"].vocab_size
    tok = Tokenizer.from_file(tmp_path / "w" / "tokenizer.json")
    cfg = loop.TrainConfig(out="x", preset="tiny", train_prefix=48, train_suffix=24, holes_per_window=4,
                           window_span=32)
    files = [f for f in corpus.list_files([corpus_dir]) if f.split == "train"]
    ws = loop.ExampleStream(files, tok, cfg, seed=0, max_canvas=32, windows=True)
    assert ws.per_file == 2  # 8 holes per file read in both layouts: 2 windows of 4
    wb = ws.batch(2)
    single = loop.ExampleStream(files, tok, cfg, seed=0, max_canvas=32).batch(2)
    assert wb.seg is not None and int(wb.seg.max()) >= 2 and single.seg is None
    assert main(["train", "--out", str(tmp_path / "a"), "--steps", "1", "--objective", "ar",
                 "--holes-per-window", "2"]) == 2
    # The default: 4 holes per row (span 64) for diffusion, one for the AR baseline; 1 asks for single holes.
    rec = _train(tmp_path / "d", corpus_dir, "--steps", "1")
    assert (rec["config"]["holes_per_window"], rec["config"]["window_span"]) == (4, 64)
    assert loop.TrainConfig(out="x", objective="ar").holes_per_window == 1
    assert loop.TrainConfig(out="x", holes_per_window=1).holes_per_window == 1
    with pytest.raises(ValueError, match="holes_per_window"):
        loop.TrainConfig(out="x", holes_per_window=-1)


def test_cpu_precision_hint_follows_the_cpu() -> None:
    """bf16 autocast is 2.9x faster with AMX and much slower without it: the trainer says which applies."""
    from edit_engine.train.loop import TrainConfig, cpu_has_amx, cpu_precision_hint

    fp32, bf16 = TrainConfig(out="-"), TrainConfig(out="-", autocast_bf16=True)
    assert "--bf16" in cpu_precision_hint(fp32, amx=True)
    assert cpu_precision_hint(bf16, amx=True) == ""
    assert "slower" in cpu_precision_hint(bf16, amx=False)
    assert cpu_precision_hint(fp32, amx=False) == ""
    assert cpu_precision_hint(TrainConfig(out="-", device="cuda"), amx=False) == ""
    assert isinstance(cpu_has_amx(), bool)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hole=st.lists(st.integers(3, 511), min_size=0, max_size=40), c=st.sampled_from([4, 8, 16, 32]),
       seed=st.integers(0, 10**6))
def test_canvas_layout(tiny_tokenizer: Tokenizer, hole: list[int], c: int, seed: int) -> None:
    """``data.lay_canvas``: every slot is a canvas slot, at least one is masked; a masked slot's target is its
    true token (the hole's, then pads) at weight 1/t >= 1; a visible slot shows its true token and has no target."""
    tok = tiny_tokenizer
    truth = torch.tensor(data.canvas_targets(hole, c, tok.pad_id))
    tokens, kind = torch.full((1, c), tok.pad_id), torch.zeros((1, c), dtype=torch.int8)
    targets, weights = torch.full((1, c), -100), torch.zeros(1, c)
    torch.manual_seed(seed)
    data.lay_canvas(tokens, kind, targets, weights, 0, 0, hole, c, tok, random.Random(seed), 0.05)
    shown, kind, targets, weights = tokens[0], kind[0], targets[0], weights[0]
    assert bool((kind == CANVAS).all())
    m = shown == tok.mask_id
    assert bool(m.any())
    assert torch.equal(targets[m], truth[m]) and bool((weights[m] >= 1.0).all())
    assert torch.equal(shown[~m], truth[~m])
    assert bool((targets[~m] == -100).all()) and bool((weights[~m] == 0).all())


def test_train_parser_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``train.cli.add_parser`` adds ``train`` with ``run`` as its handler; usage errors exit 2 with one line
    before anything is written, and the flags of the options measured and rejected are gone."""
    import argparse

    parser = argparse.ArgumentParser(prog="edit-engine")
    train_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    a = parser.parse_args(["train", "--out", "o", "--steps", "2"])
    assert a.handler is train_cli.run and (a.steps, a.holes_per_window, a.window_span) == (2, 0, 64)
    out = tmp_path / "bad"
    for bad, said in ((["--out", str(out)], "give --minutes or --steps"),
                      (["--out", str(out), "--steps", "1", "--window-span", "0"], "window_span"),
                      (["--out", str(out), "--steps", "1", "--extra-share", "0.2"], "needs extra_corpus")):
        assert main(["train", *bad]) == 2
        assert "edit-engine: error: " in (err := capsys.readouterr().err) and said in err
    for gone in ("--corrupt", "--function-share", "--pretrain-share"):
        with pytest.raises(SystemExit) as e:
            main(["train", "--out", str(out), "--steps", "1", gone, "0.3"])
        assert e.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
    assert not out.exists()
