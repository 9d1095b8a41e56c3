"""Overlap between a training corpus and the evaluation programs: which corpus files share a long run of tokens
with a HumanEval-infilling or SantaCoder-FIM (Python) program.

    python -m edit_engine.eval.contamination ROOT [ROOT ...] [--n 13] [--data DIR] [--json out.json]

A decontamination check, read-only: it reads the benchmarks only to report overlap, never to choose training
data by score. Each benchmark program (prompt + canonical hole + suffix) and each corpus file is cut into
words (punctuation and case ignored); a file is flagged when it shares an ``n``-token run with a program. Exits 1 when any
file is flagged, so a corpus can be checked before training on it (benchmarks/algorithm_corpus.sh runs it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from edit_engine.eval import benchmarks
from edit_engine.train import corpus

TOKEN = re.compile(r"\w+")  # words only, as n-gram decontamination usually counts (GPT-3: 13 words)


def tokens(text: str) -> list[str]:
    """The words of ``text``, lower-cased (punctuation dropped)."""
    return TOKEN.findall(text.lower())


def ngrams(toks: list[str], n: int) -> set[tuple[str, ...]]:
    """Every run of ``n`` consecutive words."""
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def programs(data: str | None = None) -> dict[str, str]:
    """Every distinct benchmark program, by the task id of its first task (HumanEval problems and
    SantaCoder's Python programs)."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for name in ("humaneval-single", "humaneval-multi", "santacoder-fim"):
        for t in benchmarks.load(name, data=data):
            prog = t.prefix + t.canonical + t.suffix
            if prog not in seen:
                seen.add(prog)
                out[f"{name}:{t.task_id}"] = prog
    return out


def flagged(roots: list[Path], n: int, data: str | None = None) -> list[dict[str, object]]:
    """The corpus files under ``roots`` that share an ``n``-word run with a benchmark program: the file, how many
    runs it shares, the first program it shares one with, and one shared run."""
    index: dict[tuple[str, ...], str] = {}
    for tid, prog in programs(data).items():
        for g in ngrams(tokens(prog), n):
            index.setdefault(g, tid)
    out = []
    for f in corpus.list_files(roots):
        text = corpus.read_text(f)
        if not text:
            continue
        hits = [g for g in ngrams(tokens(text), n) if g in index]
        if hits:
            out.append({"file": str(f.path), "shared_ngrams": len(hits), "task": index[hits[0]],
                        "example": " ".join(hits[0])})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edit_engine.eval.contamination",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("roots", nargs="+", help="corpus roots (as edit-engine train --corpus/--extra-corpus)")
    ap.add_argument("--n", type=int, default=13, help="tokens in a shared run (default 13)")
    ap.add_argument("--data", default=None, help="benchmark folder (default ../shared/benchmarks)")
    ap.add_argument("--json", default="", help="write the flagged files here")
    a = ap.parse_args(argv)
    hits = flagged([Path(r) for r in a.roots], a.n, a.data)
    for h in hits:
        print(f"{h['shared_ngrams']:5d}  {h['file']}  ({h['task']}: {str(h['example'])[:80]})")
    print(f"{len(hits)} file(s) share a {a.n}-token run with a benchmark program")
    if a.json:
        Path(a.json).write_text(json.dumps(hits, indent=1))
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
