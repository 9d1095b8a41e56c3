"""Shared fixtures: a tiny random model for unit tests, and the packaged model for end-to-end tests."""

from __future__ import annotations

import inspect
import json
import os
import random
import textwrap
from pathlib import Path

import pytest
import torch

# Tests share two cores with whatever else runs; one thread keeps them predictable.
torch.set_num_threads(int(os.environ.get("EDIT_ENGINE_TEST_THREADS", "1")))

from edit_engine import checkpoint  # noqa: E402
from edit_engine.engine import Engine  # noqa: E402
from edit_engine.model import PRESETS, DiffusionLM  # noqa: E402
from edit_engine.tokenizer import Tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Tokenizer:
    texts = [inspect.getsource(m) for m in (random, json.decoder, textwrap)]
    return Tokenizer.train(texts, vocab_size=PRESETS["tiny"].vocab_size)


@pytest.fixture(scope="session")
def tiny_model() -> DiffusionLM:
    torch.manual_seed(0)
    return DiffusionLM(PRESETS["tiny"]).eval()


@pytest.fixture()
def tiny_engine(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> Engine:
    return Engine(tiny_model, tiny_tokenizer)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_model: DiffusionLM,
                    tiny_tokenizer: Tokenizer) -> Path:
    d = tmp_path_factory.mktemp("tiny-ckpt")
    checkpoint.save(d, tiny_model, tiny_tokenizer, {"note": "random weights, tests only"}, dtype=torch.float32)
    return d


@pytest.fixture()
def tiny_train_argv(tmp_path: Path, tiny_tokenizer: Tokenizer) -> list[str]:
    """``edit-engine train`` arguments for a tiny run (``--out tmp_path/run``) on a four-file corpus with one
    validation file, with the tiny tokenizer; tests add ``--steps`` and what they test."""
    from edit_engine.train import corpus

    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    names = [f"part{k}.py" for k in range(10_000)]
    val = [n for n in names if corpus.CorpusFile(Path(n), n, 0, "").split == "val"][:1]
    train = [n for n in names if n not in val][:3]
    for name, m in zip(val + train, (random, json.decoder, json.encoder, inspect), strict=True):
        (corpus_dir / name).write_text(inspect.getsource(m)[:20_000])
    tiny_tokenizer.save(tmp_path / "tokenizer.json")
    return ["train", "--out", str(tmp_path / "run"), "--corpus", str(corpus_dir), "--preset", "tiny",
            "--batch-size", "2", "--train-prefix", "48", "--train-suffix", "24", "--threads", "1",
            "--warmup-steps", "2", "--tokenizer", str(tmp_path / "tokenizer.json")]


@pytest.fixture(scope="session")
def packaged_engine() -> Engine:
    return Engine.load()


@pytest.fixture()
def int8_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """Int8 serving allowed whatever this CPU has: the int8 path's arithmetic is tested on every CPU (its GEMM
    runs only on a range the CPU sums exactly), while ``--dtype int8`` declines where it would be slow."""
    from edit_engine.kernels import int8

    monkeypatch.setattr(int8, "int8_serving_reason", lambda: "")
