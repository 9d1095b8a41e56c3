"""Two runs' per-task fills side by side: which code-parsing fills each has, and how they start.

    edit-engine eval ... --out A.jsonl ; edit-engine eval ... --model DIR --out B.jsonl
    python scripts/compare_fills.py A.jsonl B.jsonl [--top 8]

For diagnosis only (what changed between two checkpoints), never for choosing one: prints the tasks where both,
only A, or only B write a fill that parses and holds code, and the first words of those fills.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys


def load(path: str) -> list[dict[str, object]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def code_parse(row: dict[str, object]) -> bool:
    from edit_engine.eval.harness import has_code

    return bool(row["parse_ok"]) and has_code(str(row["completion"]))


def first_word(row: dict[str, object]) -> str:
    words = str(row["completion"]).split()
    return words[0] if words else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)
    a, b = load(args.a), load(args.b)
    if [r["task_id"] for r in a] != [r["task_id"] for r in b]:
        ap.error("the two files hold different tasks")
    ca, cb = [code_parse(r) for r in a], [code_parse(r) for r in b]
    pairs = list(zip(ca, cb, strict=True))
    both, only_a, only_b = (sum(x and y for x, y in pairs), sum(x and not y for x, y in pairs),
                            sum(y and not x for x, y in pairs))
    print(f"code parse: A {sum(ca)}, B {sum(cb)} of {len(a)}; both {both}, only A {only_a}, only B {only_b}")
    for name, rows, ok in (("A", a, ca), ("B", b, cb)):
        words = collections.Counter(first_word(r) for r, o in zip(rows, ok, strict=True) if o)
        top = ", ".join(f"{w!r} {n}" for w, n in words.most_common(args.top))
        print(f"{name} code-parsing fills start with: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
