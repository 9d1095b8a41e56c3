"""Self-correction training (``--corrupt``): visible canvas tokens are sometimes replaced by wrong ones and every
visible slot is supervised, while validation batches stay clean so runs compare on the same examples."""

from __future__ import annotations

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


def _lay(tok: Tokenizer, hole: list[int], c: int, corrupt: float, seed: int) -> tuple[torch.Tensor, ...]:
    tokens = torch.full((1, c), tok.pad_id)
    kind = torch.zeros((1, c), dtype=torch.int8)
    targets = torch.full((1, c), -100)
    weights = torch.zeros(1, c)
    torch.manual_seed(seed)
    data.lay_canvas(tokens, kind, targets, weights, 0, 0, hole, c, tok, random.Random(seed), 0.05, corrupt)
    return tokens[0], kind[0], targets[0], weights[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hole=st.lists(st.integers(3, 511), min_size=0, max_size=40), c=st.sampled_from([4, 8, 16, 32]),
       corrupt=st.sampled_from([0.0, 0.2, 0.9]), seed=st.integers(0, 10**6))
def test_canvas_layout_with_corruption(tiny_tokenizer: Tokenizer, hole: list[int], c: int, corrupt: float,
                                       seed: int) -> None:
    """Masked slots are as without corruption (target = truth, weight 1/t); with corruption every visible real
    slot has its true token as target at weight 1, a shown token differs from the truth only there, and a wrong
    token is never a special one; pads are shown as they are. Without corruption visible slots have no target."""
    tok = tiny_tokenizer
    truth = torch.tensor(data.canvas_targets(hole, c, tok.pad_id))
    shown, kind, targets, weights = _lay(tok, hole, c, corrupt, seed)
    assert bool((kind == CANVAS).all())
    m = shown == tok.mask_id
    assert bool(m.any())
    assert torch.equal(targets[m], truth[m]) and bool((weights[m] >= 1.0).all())
    vis = ~m
    real_vis = vis & (truth != tok.pad_id)
    wrong = vis & (shown != truth)
    assert not bool((wrong & (truth == tok.pad_id)).any()), "a pad was corrupted"
    assert all(int(x) not in tok.special_ids for x in shown[wrong])
    if corrupt == 0:
        assert not bool(wrong.any()) and bool((targets[vis] == -100).all()) and bool((weights[vis] == 0).all())
    else:
        assert torch.equal(targets[real_vis], truth[real_vis]) and bool((weights[real_vis] == 1.0).all())
        assert bool((targets[vis & ~real_vis] == -100).all())


def test_corruption_rate_and_kinds(tiny_tokenizer: Tokenizer) -> None:
    """About the asked share of visible tokens is wrong, and the errors include the doubled neighbour."""
    tok = tiny_tokenizer
    rng = random.Random(0)
    shown_wrong = visible = doubled = 0
    for seed in range(300):
        hole = [rng.randrange(3, 500) for _ in range(32)]
        truth = torch.tensor(hole)
        shown, _, _, _ = _lay(tok, hole, 32, 0.2, seed)
        vis = shown != tok.mask_id
        wrong = vis & (shown != truth)
        visible += int(vis.sum())
        shown_wrong += int(wrong.sum())
        for j in wrong.nonzero().flatten().tolist():
            doubled += any(0 <= k < 32 and int(shown[j]) == hole[k] for k in (j - 1, j + 1))
    assert 0.15 < shown_wrong / visible < 0.25
    assert doubled > shown_wrong * 0.2


def test_corrupt_trains_and_validation_stays_clean(tmp_path: Path, tiny_train_argv: list[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``--corrupt 0.3 --steps 4``: training batches are laid with corruption, the 8 validation batches without;
    the record keeps the share, and bad values are refused with a clear error."""
    seen: list[float] = []
    real, real_windows = loop.collate, loop.collate_windows

    def spy(*args: object, **kw: object) -> data.Batch:
        seen.append(float(kw.get("corrupt", 0.0)))  # type: ignore[arg-type]
        return real(*args, **kw)  # type: ignore[arg-type]

    def spy_windows(*args: object, **kw: object) -> data.Batch:
        seen.append(float(kw.get("corrupt", 0.0)))  # type: ignore[arg-type]
        return real_windows(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "collate", spy)
    monkeypatch.setattr(loop, "collate_windows", spy_windows)
    out = tmp_path / "run"
    assert main([*tiny_train_argv, "--steps", "4", "--corrupt", "0.3"]) == 0
    assert seen[:8] == [0.0] * 8 and seen[8:] == [0.3] * 4
    rec = json.loads((out / "checkpoint" / "training.json").read_text())
    assert rec["config"]["corrupt"] == 0.3
    for bad in (["--corrupt", "1.0"], ["--corrupt", "-0.1"], ["--corrupt", "0.2", "--objective", "ar"]):
        assert main(["train", "--out", str(tmp_path / "bad"), "--steps", "1", *bad]) == 2
