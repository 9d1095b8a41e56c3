"""Per-character losses of training runs with different tokenizers (the tokenizer-size scaling runs).

    python scripts/tokens_per_char.py runs/tok4096 runs/tok8192 runs/tok16384

For each run directory (``edit-engine train --out DIR``): the tokenizer's tokens per character on 300 held-out
files of the corpus (the validation split, a fixed seed), and the last validation row of its training record
with the prefix (next-token) loss converted to nats per character. Per-token losses of different tokenizers are
not comparable; per character they are. One JSON object per run on stdout.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from edit_engine.tokenizer import Tokenizer
    from edit_engine.train import corpus

    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    files = [f for f in corpus.list_files() if f.split == "val"]
    rng = random.Random(0)
    texts = [t for t in (corpus.read_text(f) for f in rng.sample(files, min(300, len(files)))) if t]
    chars = sum(len(t) for t in texts)
    for run in map(Path, argv):
        tok = Tokenizer.from_file(run / "tokenizer.json")
        tpc = sum(len(tok.encode(t)) for t in texts) / chars
        rec = json.loads((run / "checkpoint" / "training.json").read_text())
        h = rec["history"][-1]
        print(json.dumps({"run": str(run), "vocab": tok.vocab_size, "parameters": rec["parameters"],
                          "tokens_seen": rec["tokens_seen"], "tokens_per_char": round(tpc, 4),
                          "prefix_nats_per_token": round(h["val_ar"], 4),
                          "prefix_nats_per_char": round(h["val_ar"] * tpc, 4),
                          "masked_ce_per_token": round(h["val_masked_ce"], 4),
                          "context_gap": round(h["context_gap"], 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
