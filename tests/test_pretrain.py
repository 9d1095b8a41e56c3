"""The pretraining phase (``--pretrain-share``): long spans of running text on a full canvas, cut on character
boundaries so that prefix + span + suffix is the file, then infill training on editor-shaped holes."""

from __future__ import annotations

import inspect
import json
import random
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.cli import main
from edit_engine.model import CANVAS
from edit_engine.tokenizer import Tokenizer
from edit_engine.train import data, loop

_chars = st.sampled_from(list("abcxyz_019 ():=+-.,'\"#\t") + ["\n", "\n", "    ", "é", "中", "😀", "ß"])
texts = st.lists(_chars, min_size=1, max_size=500).map("".join)


def _cut_points(text: str, prefix: str, hole: str, suffix: str) -> list[int]:
    """Every offset a where the text reads prefix | hole | suffix, with the hole starting at a."""
    return [a for a in range(len(text) + 1)
            if text[:a].endswith(prefix) and text[a:].startswith(hole + suffix)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts, seed=st.integers(0, 2**32 - 1), span=st.integers(1, 48), max_prefix=st.integers(1, 48),
       max_suffix=st.integers(1, 24))
def test_span_example_is_contiguous_text(tiny_tokenizer: Tokenizer, text: str, seed: int, span: int,
                                         max_prefix: int, max_suffix: int) -> None:
    ex = data.make_span_example(tiny_tokenizer, text, random.Random(seed), max_prefix, max_suffix, span=span)
    assert ex is not None and ex.kind == "span"
    assert len(ex.prefix) <= max_prefix and len(ex.suffix) <= max_suffix and 1 <= len(ex.hole) <= span + 1
    dec = tiny_tokenizer.decode
    # The span is whole characters of the file, and the suffix starts right where it ends (no hidden gap).
    assert _cut_points(text, dec(ex.prefix), dec(ex.hole) if len(ex.hole) <= span else "", "") != []
    if len(ex.hole) <= span:
        assert _cut_points(text, dec(ex.prefix), dec(ex.hole), dec(ex.suffix)) != []
    if ex.suffix:  # the text goes on after the span, so the span nearly fills the canvas (a character's bytes)
        assert len(ex.hole) >= span - 4


def test_span_examples_fill_the_canvas(tiny_tokenizer: Tokenizer) -> None:
    """On real code the spans fill all 32 slots (pads only at a file's end), where editor-shaped holes on a
    drawn canvas leave many pad slots: the phase's point is more real-token targets per row."""
    text = "\n\n".join(inspect.getsource(m) for m in (json.decoder, random))
    rng = random.Random(0)
    torch.manual_seed(0)  # collate draws its masks from torch's global generator
    spans = [data.make_span_example(tiny_tokenizer, text, rng, 48, 24, span=32) for _ in range(64)]
    b = data.collate([s for s in spans if s is not None], tiny_tokenizer, rng, max_canvas=32, canvas=32)
    assert b.n_canvas == 64 * 32
    canvas = b.kind == CANVAS
    assert int(canvas.sum()) == 64 * 32
    pads = int(((b.targets == tiny_tokenizer.pad_id) & canvas).sum())
    masked = int((b.targets != -100).sum())
    assert masked > 0 and pads <= masked * 0.05
    holes = [data.make_example(tiny_tokenizer, text, rng, 48, 24) for _ in range(64)]
    hb = data.collate([h for h in holes if h is not None], tiny_tokenizer, rng, max_canvas=32)
    hole_pads = int((hb.targets == tiny_tokenizer.pad_id).sum())
    assert hole_pads > pads


def test_pretrain_phase_then_infill(tmp_path: Path, tiny_train_argv: list[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``--pretrain-share 0.5 --steps 20``: steps before the half-way point train on spans (full canvases),
    then on holes; the log says which, the record keeps the share, and bad values are refused."""
    canvases: list[int] = []  # collate's fixed canvas per batch (0 = drawn sizes: holes; -1 windows), in order

    def spy(*args: object, **kw: object) -> data.Batch:
        canvases.append(int(kw.get("canvas", 0)))  # type: ignore[call-overload]
        return real(*args, **kw)  # type: ignore[arg-type]

    def spy_windows(*args: object, **kw: object) -> data.Batch:
        canvases.append(-1)  # several holes per row (the default after the pretraining phase)
        return real_windows(*args, **kw)  # type: ignore[arg-type]

    real, real_windows = loop.collate, loop.collate_windows
    monkeypatch.setattr(loop, "collate", spy)
    monkeypatch.setattr(loop, "collate_windows", spy_windows)
    out = tmp_path / "run"
    assert main([*tiny_train_argv, "--steps", "20", "--pretrain-share", "0.5"]) == 0
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    phases = {r["step"]: r["phase"] for r in rows if "phase" in r and not r.get("eval")}
    assert phases == {10: "pretrain", 20: "infill"}
    # 8 validation batches (single holes), then 10 batches of spans, then 10 of holes (4 per row by default).
    assert canvases[:8] == [0] * 8 and len(canvases) == 28
    assert all(c > 0 for c in canvases[8:18]) and canvases[18:] == [-1] * 10
    rec = json.loads((out / "checkpoint" / "training.json").read_text())
    assert rec["config"]["pretrain_share"] == 0.5 and rec["step"] == 20
    for bad in (["--pretrain-share", "1.0"], ["--pretrain-share", "-0.1"],
                ["--pretrain-share", "0.3", "--objective", "ar"]):
        assert main(["train", "--out", str(tmp_path / "bad"), "--steps", "1", *bad]) == 2
    with pytest.raises(ValueError, match="pretrain_share"):
        loop.TrainConfig(out="x", pretrain_share=1.2)
