"""What syntax-aware planning and repair buy, measured with a real model. Prints a table and writes JSON.

1. HumanEval multi-line infilling (evaluation only; never tune on it): the hole becomes an empty line, the cursor
   sits on it, and ``Engine.complete`` fills it with and without repair. Parse rate = share of tasks whose
   document (prompt + fill + suffix) parses: with tree-sitter (no ERROR/MISSING node) and with ``ast.parse``
   (tree-sitter-python accepts wrong indentation, ``ast`` does not), and code parse (``ast`` accepts it and the
   fill holds code, not only a comment: ``harness.has_code``). pass@1 (greedy) runs the task's tests in
   the project's sandbox (``edit_engine.eval.execution``).
2. Real files (held-out validation split of the training corpus, files chosen by a fixed seed): a span is
   deleted at a random place (part of a line, the rest of a line, or a whole line) and completed at the cursor
   with the syntax-aware planner (``language="python"``) and with the line-based one (``"plaintext"``), repair
   off in both so only the span choice differs. Reported: exact match with the deleted text (whitespace
   squashed) and parse rate.

Usage (nice it: training shares the machine):
    OMP_NUM_THREADS=1 nice -n 19 python scripts/measure_syntax.py --limit 100 --files 6 --positions 10 \\
        [--model PATH] [--out runs/measure_syntax.json]
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edit_engine import syntax  # noqa: E402
from edit_engine.engine import Engine  # noqa: E402
from edit_engine.eval.harness import has_code  # noqa: E402


def parses(text: str) -> tuple[bool, bool]:
    """(tree-sitter finds no ERROR/MISSING node, ast.parse accepts it)."""
    doc = syntax.Document.parse(text, "python")
    ts_ok = doc.tree is not None and not doc.tree.root_node.has_error
    try:
        ast.parse(text)
        py_ok = True
    except (SyntaxError, ValueError):
        py_ok = False
    return ts_ok, py_ok


def _rate(xs: list[bool]) -> float:
    return round(100.0 * sum(xs) / max(1, len(xs)), 1)


def humaneval(engine: Engine, limit: int, max_tokens: int, execute: bool, log: Path | None) -> dict[str, Any]:
    from edit_engine.eval import benchmarks
    from edit_engine.eval.execution import run_program

    tasks = benchmarks.load("humaneval-multi", limit=limit)
    rows: list[dict[str, Any]] = []
    for i, t in enumerate(tasks):
        print(f"humaneval {i}/{len(tasks)}", file=sys.stderr, flush=True)
        text = t.prefix + "\n" + t.suffix  # the hole becomes an empty line with the cursor on it
        offset = len(t.prefix)
        row: dict[str, Any] = {"task_id": t.task_id,
                               "canon": parses(t.prefix + t.canonical + t.suffix)[0]}
        for tag, rep in (("0", False), ("1", True)):
            c = engine.complete(text, offset, "python", max_tokens=max_tokens or None, repair=rep)
            new = text[: c.start] + c.text + text[c.end :]
            row["ts" + tag], row["py" + tag] = parses(new)
            row["code" + tag] = row["py" + tag] and has_code(c.text)  # not an empty or comment-only fill
            row["ms" + tag], row["nfe" + tag], row["kind"] = c.elapsed_ms, c.nfe, c.kind
            if rep:
                row["repaired"] = c.nfe > row["nfe0"]
            if execute:  # the program is prefix + completion + suffix + tests, the completion ending the line
                completion = new[len(t.prefix) : len(new) - len(t.suffix)]
                row["pass" + tag] = run_program(t.program(completion)).passed
        rows.append(row)
        if log is not None:
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
    return summarize(rows, max_tokens)


def summarize(rows: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    n = len(rows)

    def side(tag: str) -> dict[str, Any]:
        out = {"parse_rate_tree_sitter": _rate([r["ts" + tag] for r in rows]),
               "parse_rate_ast": _rate([r["py" + tag] for r in rows]),
               "code_parse_rate_ast": _rate([r.get("code" + tag, False) for r in rows]),
               "mean_ms": round(sum(r["ms" + tag] for r in rows) / max(1, n), 1),
               "mean_nfe": round(sum(r["nfe" + tag] for r in rows) / max(1, n), 2)}
        if rows and "pass" + tag in rows[0]:
            out["pass@1"] = _rate([r["pass" + tag] for r in rows])
        return out

    return {"tasks": n, "max_tokens": max_tokens, "canonical_parse_rate": _rate([r["canon"] for r in rows]),
            "without_repair": side("0"),
            "with_repair": {**side("1"), "tasks_repaired": sum(r.get("repaired", False) for r in rows)}}


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def held_out_files(n: int, seed: int) -> list[Path]:
    from edit_engine.train import corpus

    val = sorted(f.path for f in corpus.list_files() if f.split == "val" and 2_000 <= f.size <= 60_000)
    return random.Random(seed).sample(val, min(n, len(val)))


def cut(text: str, rng: random.Random) -> tuple[str, int, str, str] | None:
    """Delete a span at a random code line: (document, cursor, deleted text, scenario)."""
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    code = [i for i, line in enumerate(lines) if line.strip() and not line.strip().startswith("#")]
    if not code:
        return None
    i = rng.choice(code)
    line, ls = lines[i], starts[i]
    ind = len(line) - len(line.lstrip())
    scenario = rng.choice(["middle", "rest", "line"])
    if scenario == "line":
        a, b = ls + ind, ls + len(line)
        return text[:ls] + text[b:], ls, line[ind:], scenario
    bounds = [j for j in range(ind + 1, len(line)) if not line[j - 1].isalnum() or not line[j].isalnum()]
    if len(bounds) < 2:
        return None
    a = rng.choice(bounds[:-1])
    b = len(line) if scenario == "rest" else rng.choice([x for x in bounds if x > a])
    return text[: ls + a] + text[ls + b :], ls + a, line[a:b], scenario


def real_files(engine: Engine, n_files: int, positions: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    out: dict[str, dict[str, list[bool]]] = {"syntax": {"em": [], "ts": []}, "lines": {"em": [], "ts": []}}
    kinds: dict[str, int] = {}
    files = held_out_files(n_files, seed)
    for path in files:
        src = path.read_text(encoding="utf-8", errors="replace")
        if not parses(src)[0]:
            continue
        for _ in range(positions):
            got = cut(src, rng)
            if got is None:
                continue
            text, offset, gold, _scenario = got
            for tag, lang in (("syntax", "python"), ("lines", "plaintext")):
                c = engine.complete(text, offset, lang, repair=False)
                if tag == "syntax":
                    kinds[c.kind] = kinds.get(c.kind, 0) + 1
                new = text[: c.start] + c.text + text[c.end :]
                out[tag]["em"].append(_squash(new) == _squash(src))
                out[tag]["ts"].append(parses(new)[0])
    return {
        "files": [str(p.name) for p in files], "cases": len(out["syntax"]["em"]), "span_kinds": kinds,
        "syntax_aware": {"exact_match": _rate(out["syntax"]["em"]), "parse_rate": _rate(out["syntax"]["ts"])},
        "line_based": {"exact_match": _rate(out["lines"]["em"]), "parse_rate": _rate(out["lines"]["ts"])},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="checkpoint directory (default: the packaged model)")
    ap.add_argument("--limit", type=int, default=100, help="HumanEval multi-line tasks (the first N)")
    ap.add_argument("--max-tokens", type=int, default=0, help="canvas cap (0: the planner's, 64 for a statement)")
    ap.add_argument("--files", type=int, default=6, help="held-out source files (0: skip)")
    ap.add_argument("--positions", type=int, default=10, help="cursor positions per file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-exec", action="store_true", help="skip pass@1 (running the HumanEval tests)")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    ap.add_argument("--log", default=None, help="append one JSON line per HumanEval task here")
    args = ap.parse_args()
    engine = Engine.load(args.model, threads=args.threads)
    t0 = time.perf_counter()
    res: dict[str, Any] = {"model": str(engine.path), "command": " ".join(sys.argv)}
    res["humaneval_multiline"] = humaneval(engine, args.limit, args.max_tokens, not args.no_exec,
                                           Path(args.log) if args.log else None)
    if args.files:
        res["real_files"] = real_files(engine, args.files, args.positions, args.seed)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    he = res["humaneval_multiline"]
    print(f"HumanEval multi-line, {he['tasks']} tasks (canonical fills parse: {he['canonical_parse_rate']}%)")
    print(f"{'':18}{'parse% (ts)':>12}{'parse% (ast)':>13}{'code% (ast)':>12}{'pass@1':>8}{'mean ms':>10}"
          f"{'mean nfe':>10}")
    for name, key in (("without repair", "without_repair"), ("with repair", "with_repair")):
        r = he[key]
        print(f"{name:18}{r['parse_rate_tree_sitter']:>12}{r['parse_rate_ast']:>13}{r['code_parse_rate_ast']:>12}"
              f"{r.get('pass@1', '-'):>8}"
              f"{r['mean_ms']:>10}{r['mean_nfe']:>10}")
    if "real_files" in res:
        rf = res["real_files"]
        print(f"\nHeld-out files ({len(rf['files'])} files, {rf['cases']} cursor positions), repair off")
        print(f"{'':18}{'exact %':>10}{'parse %':>10}")
        for name, key in (("syntax-aware", "syntax_aware"), ("line-based", "line_based")):
            print(f"{name:18}{rf[key]['exact_match']:>10}{rf[key]['parse_rate']:>10}")
    print(json.dumps(res, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
