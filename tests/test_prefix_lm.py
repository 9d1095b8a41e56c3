"""``edit_engine.eval.prefix_lm``: the diffusion weights decoded left to right by their causal prefix rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from edit_engine import Engine
from edit_engine.eval import prefix_lm
from edit_engine.eval.benchmarks import Task
from edit_engine.model.network import PREFIX, DiffusionLM
from edit_engine.model.tokenizer import Tokenizer


def _oracle(model: DiffusionLM, tok: Tokenizer, p_ids: list[int], n: int) -> list[int]:
    """Greedy decoding by full recompute of the causal prefix (no cache), ``n`` tokens or to a newline."""
    ids, out = list(p_ids), []
    for _ in range(n):
        kind = torch.full((1, len(ids)), PREFIX, dtype=torch.int8)
        logits = model.head(model(torch.tensor([ids]), kind)[:, -1]).float()[0]
        logits[[tok.mask_id, tok.pad_id]] = float("-inf")
        t = int(logits.argmax())
        if t == tok.eos_id:
            break
        out.append(t)
        ids.append(t)
        if "\n" in tok.decode([t]):
            break
    return out


def test_the_cached_decoder_equals_full_recompute(tiny_checkpoint: Path) -> None:
    eng = Engine.load(tiny_checkpoint)
    fill = prefix_lm.prefix_lm_filler(eng, max_tokens=12)
    for prefix in ("def add(a, b):\n    return ", "import os\n\nx = os.path.join("):
        got = fill(Task("t", "python", prefix, "\n\nprint(1)\n", "a + b", single_line=True))
        p_ids, _ = eng.context_ids(prefix, "\n\nprint(1)\n")
        want = _oracle(eng.model, eng.tokenizer, p_ids, 12)
        assert got.text == eng.tokenizer.decode(want) and got.tokens == len(want) >= 1
        assert got.nfe >= got.tokens and "\n" not in got.text.rstrip("\n")


def test_the_filler_applies_the_novelty_bias(tiny_checkpoint: Path, monkeypatch: Any) -> None:
    """The filler adds ``Engine.novelty_bias`` to every step: banning the token it chose first changes that token."""
    eng = Engine.load(tiny_checkpoint)
    task = Task("t", "python", "def add(a, b):\n    return ", "\n", "a + b", single_line=True)
    plain = prefix_lm.prefix_lm_filler(eng, max_tokens=8)(task)
    tok = eng.tokenizer
    ban = torch.zeros(eng.model.cfg.vocab_size)
    used = {tok.decode([i]) for i in range(tok.vocab_size) if tok.decode([i]) and tok.decode([i]) in plain.text}
    ban[[i for i in range(tok.vocab_size) if tok.decode([i]) in used]] = -1e4  # every piece of the plain fill
    monkeypatch.setattr(eng, "novelty_bias", lambda *a, **k: ban)
    banned = prefix_lm.prefix_lm_filler(eng, max_tokens=8, novel_penalty=1.0)(task)
    assert plain.text and banned.text != plain.text
