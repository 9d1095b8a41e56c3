"""The context-gap probe on held-out corpus files."""

from __future__ import annotations

import inspect
import json
import math
import textwrap
from pathlib import Path

import pytest

from edit_engine.engine import Engine
from edit_engine.eval.context_gap import context_gap
from edit_engine.train.corpus import CorpusFile


def _val_root(tmp_path: Path, n: int = 3) -> Path:
    """A corpus root whose files all fall in the validation split (the split hashes the relative path)."""
    sources = [inspect.getsource(m) for m in (json, textwrap)]
    made, i = 0, 0
    while made < n:
        name = f"mod{i}.py"
        i += 1
        if CorpusFile(tmp_path / name, name, 1000, "stdlib").split != "val":
            continue
        (tmp_path / name).write_text(sources[made % len(sources)][:20000])
        made += 1
    return tmp_path


def test_context_gap_on_held_out_files(tiny_engine: Engine, tmp_path: Path) -> None:
    root = _val_root(tmp_path)
    r = context_gap(tiny_engine, limit=4, batch_size=2, roots=[root])
    assert r["n"] == 4 and r["files"] == 3
    for k in ("val_masked_ce", "val_masked_ce_shuffled", "context_gap", "val_diffusion", "val_ar"):
        assert math.isfinite(r[k]), k
    assert r["context_gap"] == pytest.approx(r["val_masked_ce_shuffled"] - r["val_masked_ce"], abs=1e-6)
    assert not tiny_engine.model.training  # evaluate() switches to train mode; the probe restores it


def test_context_gap_is_deterministic(tiny_engine: Engine, tmp_path: Path) -> None:
    root = _val_root(tmp_path)
    a = context_gap(tiny_engine, limit=2, batch_size=2, roots=[root], seed=3)
    b = context_gap(tiny_engine, limit=2, batch_size=2, roots=[root], seed=3)
    assert a == b
    # One batch: the split by target (real tokens, pads) recombines to the masked-token cross-entropy.
    share = a["pad_share"]
    assert 0.0 <= share <= 1.0
    assert (1 - share) * a["masked_ce_tokens"] + share * a["masked_ce_pads"] == pytest.approx(
        a["val_masked_ce"], rel=1e-4)


def test_context_gap_needs_val_files_and_two_rows(tiny_engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="held-out"):
        context_gap(tiny_engine, limit=2, roots=[tmp_path])
    with pytest.raises(ValueError, match="batch_size"):
        context_gap(tiny_engine, limit=2, batch_size=1, roots=[tmp_path])


def test_cli_context_gap(tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edit_engine.cli.main import main

    root = _val_root(tmp_path)
    argv = ["eval", "--context-gap", "--model", str(tiny_checkpoint), "--limit", "4", "--corpus", str(root),
            "--json"]
    assert main(argv) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["n"] == 16 and r["files"] == 3 and "context_gap" in r  # one whole batch of 16
    assert main(["eval", "--context-gap", "--model", str(tiny_checkpoint), "--corpus", str(tmp_path / "none")]) == 2
