"""Does the model use its context? Hole-token loss with the real context versus another example's context.

Examples are cut from the held-out files of the training corpus (``corpus.list_files`` with ``split == "val"``,
the roots the checkpoint was trained on when its record names them), exactly as in training
(``data.make_example`` / ``collate``), and scored with ``loop.evaluate``: ``context_gap`` = masked-token
cross-entropy with shuffled context minus with the real one (nats per masked token). A model that ignores its
context has a gap near 0; the gap is the cheapest signal that training is working.

The masked-token cross-entropy is also split by target: ``masked_ce_tokens`` on slots whose target is a real
token (what the fill says) and ``masked_ce_pads`` on pad targets (where the fill ends; NaN without any), with
``pad_share`` the pads' share of the masked slots; a change of recipe can move the two apart. These three are
averages over all masked slots, where ``val_masked_ce`` is the mean of per-batch means (the same with one batch).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from edit_engine.engine import Engine


def context_gap(engine: Engine, limit: int = 64, batch_size: int = 16, seed: int = 0,
                roots: list[Path] | None = None) -> dict[str, Any]:
    """Validation losses on ``limit`` examples (rounded up to whole batches of ``batch_size`` >= 2)."""
    from edit_engine.train import corpus
    from edit_engine.train.data import Batch, Example, collate, make_example
    from edit_engine.train.loop import evaluate

    if batch_size < 2:
        raise ValueError("batch_size must be >= 2 (the shuffled context comes from another row)")
    rec = engine.record
    if roots is None:
        named = rec.get("corpus", {}).get("roots") if isinstance(rec.get("corpus"), dict) else None
        roots = [Path(r) for r in named if Path(r).is_dir()] if named else None
        roots = roots or corpus.default_roots()
    files = [f for f in corpus.list_files(roots) if f.split == "val"]
    if not files:
        raise ValueError(f"no held-out files under {', '.join(map(str, roots))}")
    cfg = rec.get("config", {}) if isinstance(rec.get("config"), dict) else {}
    max_prefix = int(cfg.get("train_prefix", 256))
    max_suffix = int(cfg.get("train_suffix", 96))
    rng = random.Random(seed)
    torch.manual_seed(seed)  # collate draws its masks from torch's global generator
    n_batches = max(1, -(-limit // batch_size))
    batches: list[Batch] = []
    texts: dict[Path, str | None] = {}
    for _ in range(n_batches):
        examples: list[Example] = []
        while len(examples) < batch_size:
            f = rng.choice(files)
            if f.path not in texts:
                texts[f.path] = corpus.read_text(f)
            text = texts[f.path]
            if not text:
                continue
            ex = make_example(engine.tokenizer, text, rng, max_prefix, max_suffix)
            if ex is not None:
                examples.append(ex)
        batches.append(collate(examples, engine.tokenizer, rng))
    model = engine.model
    was_training = model.training
    ev = evaluate(model, batches, str(model.device))
    split = _split_ce(model, batches, engine.tokenizer.pad_id)
    model.train(was_training)  # evaluate() leaves the model in training mode
    return {"n": n_batches * batch_size, "files": len(files), "roots": [str(r) for r in roots], **ev, **split}


@torch.no_grad()
def _split_ce(model: Any, batches: list[Any], pad_id: int) -> dict[str, float]:
    """Masked-slot cross-entropy on real-token targets and on pad targets (nats per slot), and the pads'
    share of the masked slots, over all batches."""
    import torch.nn.functional as F

    model.eval()
    dev = str(model.device)
    tok_sum = pad_sum = 0.0
    n_tok = n_pad = 0
    for b in batches:
        h = model(b.tokens.to(dev), b.kind.to(dev))
        tgt = b.targets.to(dev)
        sel = tgt != -100
        ce = F.cross_entropy(model.head(h[sel]).float(), tgt[sel], reduction="none")
        is_pad = tgt[sel] == pad_id
        tok_sum += float(ce[~is_pad].sum())
        pad_sum += float(ce[is_pad].sum())
        n_tok += int((~is_pad).sum())
        n_pad += int(is_pad.sum())
    return {"masked_ce_tokens": tok_sum / max(1, n_tok), "masked_ce_pads": pad_sum / n_pad if n_pad else float("nan"),
            "pad_share": n_pad / max(1, n_tok + n_pad)}
