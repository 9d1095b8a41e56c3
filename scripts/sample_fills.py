"""Ten sample fills from a model on code written for this script (so not in any training corpus).

    python scripts/sample_fills.py [--model DIR] [--json OUT]

Prints, per case, the expected hole and the model's fill, with passes and forward passes; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

CASES: list[tuple[str, str, str]] = [
    # (prefix, suffix, what a programmer would write)
    ("def area(radius):\n    return ", "\n", "3.14159 * radius ** 2"),
    ("import os\n\n\ndef list_python_files(folder):\n    return [f for f in os.listdir(folder) if f.endswith(",
     ")]\n", '".py"'),
    ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        ",
     "\n\n    def pop(self):\n        return self.items.pop()\n", "self.items.append(item)"),
    ("def is_even(n):\n    return n % 2 ", "\n", "== 0"),
    ("for i in range(10):\n    if i % 3 == 0:\n        ", "\n", "print(i)"),
    ("with open(path) as f:\n    lines = f.", "\n", "readlines()"),
    ("def greet(name):\n    print(f\"Hello, {", "}!\")\n", "name"),
    ("import json\n\n\ndef load(path):\n    with open(path) as f:\n        return ", "\n", "json.load(f)"),
    ("def maximum(values):\n    best = values[0]\n    for v in values:\n        if v > best:\n            ",
     "\n    return best\n", "best = v"),
    ("try:\n    value = int(text)\nexcept ", ":\n    value = 0\n", "ValueError"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    ap.add_argument("--json", help="write the cases and fills here")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    from edit_engine import Engine

    eng = Engine.load(a.model, threads=a.threads)
    rows = []
    for i, (pre, suf, want) in enumerate(CASES):
        r = eng.infill(pre, suf, max_tokens=32)
        rows.append({"case": i, "prefix_tail": pre.splitlines()[-1], "expected": want, "fill": r.text,
                     "passes": r.passes, "nfe": r.nfe, "tokens": r.tokens, "ms": round(r.elapsed_ms, 1),
                     "stop_reason": r.stop_reason})
    w = max(len(r["prefix_tail"]) for r in rows)
    print(f"{'#':>2}  {'line before the hole':<{w}}  {'expected':<24} fill (passes/nfe/tokens)")
    for r in rows:
        print(f"{r['case']:>2}  {r['prefix_tail']:<{w}}  {r['expected']!r:<24} {r['fill']!r} "
              f"({r['passes']}/{r['nfe']}/{r['tokens']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": str(eng.path), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
