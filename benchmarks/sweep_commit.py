"""The commit policy's speed-quality curve, measured on held-out code (never on the benchmarks).

    python benchmarks/sweep_commit.py [--model DIR] [--n 200] [--holes lines|functions|words|bodies]
                                      [--corpus DIR ... [--all-files]] [--floors 1,4] [--spread R]
                                      [--pad-thresholds 0.3,0.5] [--floor-ramp R] [--document [--no-repair]]
                                      [--initial-canvas N] [--json OUT]

    python benchmarks/sweep_commit.py --model DIR --n 2 --floors 1 --json /tmp/s.json   # a smoke run

``--document`` fills each hole through the editor's path (``Engine.complete``: planner, post-processing, the
parse check and its repair rounds, the cursor on an empty line of its own), as ``edit-engine eval --document``
does on the benchmarks.

Holes (``edit_engine.eval.holes``, a fixed seed): by default single lines, with their newline as HumanEval
single-line cuts them (``holes``); ``--holes words``: the rest of a line being typed, the cursor inside a word
(``word_holes``); ``--holes bodies``: a block's first line after its header, the cursor at the header's end
(``body_holes``); ``--holes functions``: a body line of a short function with a docstring, that function alone
as context (``function_holes``). They are cut from the training corpus's validation split (files whose path hash
puts them in ``val``; the training run never sees them), or with ``--corpus DIR --all-files`` from every file of
a root no checkpoint trained on.

For each commit policy (threshold x floor) it fills every hole and reports exact match (the line
exactly), line-prefix accuracy (how much of the true line the fill gets right from the start, in characters,
indentation included), edit similarity (``harness.edit_similarity``: whitespace around the line stripped),
forward passes per generated token, milliseconds per fill, the share of empty fills and the share of fills after
which the whole file still parses (of the holes whose file parses as it is), and the share that parses with a
fill holding code (not only a comment: a comment line parses anywhere, like an empty fill); and, at the default
policy, the length rule's ``pad_threshold``. The default policy is chosen from this table (docs/results-archive-2026-12-05.md,
"Commit policy"); the benchmarks are run once, at that point, to report, not to tune.

Prints one table row per policy, then the whole result as one JSON line; ``--json OUT`` also writes it to OUT
(per-hole edit similarities included, for paired comparisons of two checkpoints).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# (threshold, pad_threshold, min_commit): the commit policy (threshold, and the floor of slots committed per
# pass), and the length rule's threshold (sampler module doc).
POLICIES: list[tuple[float, float, int]] = [
    (1.01, 0.5, 1),  # one slot per pass: the most confident (no parallelism)
    (0.9, 0.5, 1),
    (0.7, 0.5, 1),
    (0.5, 0.5, 1),
    (0.9, 0.3, 1),
    (0.9, 0.2, 1),
    (0.9, 0.7, 1),
    # the floor: at least k slots per pass, the k most confident, whatever their confidence
    (0.9, 0.5, 2),
    (0.9, 0.5, 3),
    (0.9, 0.5, 4),
    (0.9, 0.5, 6),
    (0.9, 0.5, 8),
    (0.9, 0.5, 16),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--plot", metavar="PNG", help="also draw speed against quality, a point per setting "
                    "(needs matplotlib)")
    ap.add_argument("--only-floors", action="store_true", help="only the rows with a floor above one")
    ap.add_argument("--no-line-stop", action="store_true",
                    help="denoise whole fills (the line scored is the same; only passes and time differ)")
    ap.add_argument("--holes", choices=("lines", "functions", "words", "bodies"), default="lines",
                    help="lines: any line of a held-out file, with the file as context; functions: a body line of a "
                    "short held-out function with a docstring, with that function alone as context (HumanEval's "
                    "shape)")
    ap.add_argument("--corpus", nargs="+", metavar="DIR",
                    help="cut the holes from these source roots' validation files (default: the training corpus)")
    ap.add_argument("--all-files", action="store_true",
                    help="with --corpus: every file under the roots, not only the validation split (a root no "
                    "checkpoint trained on, e.g. benchmarks/algorithm_corpus.sh DIR heldout)")
    ap.add_argument("--initial-canvas", type=int, default=16, help="canvas slots to start with (grows when full)")
    ap.add_argument("--spread", type=int, default=0, metavar="R",
                    help="every row with the spread floor of radius R (SamplerConfig.spread; 0 = off)")
    ap.add_argument("--novel-penalty", type=float, default=0.0, metavar="P",
                    help="every row with the novel-name penalty P (SamplerConfig.novel_penalty; 0 = off)")
    ap.add_argument("--floor-ramp", type=int, default=0, metavar="R",
                    help="every row with the floor ramped up over the first passes, R, 2R, 4R, ... up to the row's "
                    "floor (SamplerConfig.floor_ramp; 0 = off)")
    ap.add_argument("--floors", help="only the default policy (confidence, 0.9) at these floors, e.g. 1,2,4")
    ap.add_argument("--document", action="store_true",
                    help="the editor's path: Engine.complete on the hole's document, the cursor on an empty line of "
                         "its own (planner, post-processing, parse check and repair), as eval --document does")
    ap.add_argument("--no-repair", action="store_true", help="with --document: no repair rounds")
    ap.add_argument("--pad-thresholds", metavar="T,T",
                    help="with --floors: each floor at these length-rule thresholds (default 0.5; 0 = the rule off, pads "
                    "slot by slot), e.g. 0.3,0.5,0.7")
    a = ap.parse_args(argv)
    if a.plot:
        from edit_engine.cli.plots import require

        require()  # before the sweep, not after it
    floors = {int(x) for x in a.floors.split(",")} if a.floors else None
    if floors is not None:
        known = {f for thr, pthr, f in POLICIES if (thr, pthr) == (0.9, 0.5)}
        if floors - known:
            ap.error(f"--floors: no policy row for {sorted(floors - known)} (rows have {sorted(known)})")
    if a.all_files and not a.corpus:
        ap.error("--all-files needs --corpus (every file of the training corpus is not held out)")
    if a.no_repair and not a.document:
        ap.error("--no-repair needs --document")
    if a.document and a.initial_canvas != 16:
        ap.error("--initial-canvas does not apply to --document (the planner sizes the canvas)")
    pads = [float(x) for x in a.pad_thresholds.split(",")] if a.pad_thresholds else [0.5]
    if a.pad_thresholds and floors is None:
        ap.error("--pad-thresholds needs --floors")
    if a.floor_ramp < 0:
        ap.error("--floor-ramp: 0 (off) or a first-pass floor >= 1")
    if not all(0.0 <= p <= 1.0 for p in pads):  # SamplerConfig's range; 0 turns the length rule off
        ap.error("--pad-thresholds: each between 0 and 1 (0: the length rule off)")
    policies = POLICIES if floors is None else [(0.9, p, f) for f in sorted(floors) for p in pads]
    from edit_engine import Engine
    from edit_engine.eval.benchmarks import Task
    from edit_engine.eval.harness import document_filler, edit_similarity, has_code
    from edit_engine.eval.holes import (
        Cut,
        NoHeldOutFiles,
        body_holes,
        function_holes,
        holes,
        parses,
        prefix_match,
        word_holes,
    )

    cutters: dict[str, Callable[..., list[Cut]]] = {"lines": holes, "functions": function_holes,
                                                    "words": word_holes, "bodies": body_holes}
    make = cutters[a.holes]
    try:
        cases = make(a.n, roots=a.corpus, all_files=a.all_files)
    except NoHeldOutFiles as e:
        ap.error(str(e))
    if not cases:
        ap.error("no holes could be cut from these files")
    eng = Engine.load(a.model, threads=a.threads)
    words = a.holes == "words"  # the rest of a line being typed: no newline in the hole
    bodies = a.holes == "bodies"  # a line break and a block's first line, after its header
    eng.infill(cases[0][0], cases[0][1])  # warm-up
    # The parse check counts only holes whose file parses as it is (some corpus files are Python 2 or templates).
    parse_ok_files = [parses(wp + line + ws) for _, _, line, wp, ws in cases]
    rows: list[dict[str, Any]] = []
    print(f"{'threshold':>10}{'pad thr':>8}{'floor':>6}{'exact':>8}{'prefix acc':>12}{'edit sim':>10}{'nfe/token':>11}{'ms/fill':>9}"
          f"{'empty':>7}{'parse':>7}{'code':>7}", flush=True)
    for thr, pthr, floor in policies:
        if a.only_floors and floor == 1:
            continue
        exact = acc = sim = 0.0
        nfe = toks = 0
        empty = parsed = code_parsed = 0
        ms: list[float] = []
        sims: list[float] = []
        kw = dict(threshold=thr, pad_threshold=pthr, min_commit=floor, spread=a.spread,
                  floor_ramp=a.floor_ramp, novel_penalty=a.novel_penalty)
        doc_fill = (document_filler(eng, whole_lines=not (words or bodies), line_stop=not a.no_line_stop,
                                    repair=not a.no_repair, **kw) if a.document else None)
        for (pre, suf, line, whole_pre, whole_suf), check in zip(cases, parse_ok_files, strict=True):
            t = time.perf_counter()
            if doc_fill is not None:  # the completion is what the edit puts between prefix and suffix
                d = doc_fill(Task("held-out", "python", pre, suf, line, single_line=not bodies))
                text, r_nfe, r_tokens = d.text, d.nfe, d.tokens
                fill = text if text.endswith("\n") or not text else text + "\n"
            else:
                r = eng.infill(pre, suf, max_tokens=64, line_stop=not a.no_line_stop,
                               initial_canvas=a.initial_canvas, **kw)
                text, r_nfe, r_tokens = r.text, r.nfe, r.tokens
                fill = r.text.split("\n", 1)[0] + "\n" if "\n" in r.text else r.text + "\n"
            if words:
                fill = fill.split("\n", 1)[0]
            elif bodies:  # the body's first line (the whole body was filled: a block body is multi-line)
                fill = "\n" + text.lstrip("\n").split("\n", 1)[0] if text.strip() else ""
            whole = whole_pre + fill + whole_suf
            ms.append((time.perf_counter() - t) * 1000)
            exact += fill == line
            acc += prefix_match(fill, line)
            sims.append(edit_similarity(fill, line))
            sim += sims[-1]
            nfe += r_nfe
            toks += r_tokens
            empty += not text.strip()
            ok = check and parses(whole)
            parsed += ok
            code_parsed += ok and has_code(fill)
        n = len(cases)
        row = {"threshold": thr, "pad_threshold": pthr, "min_commit": floor,
               "floor_ramp": a.floor_ramp, "novel_penalty": a.novel_penalty, "n": n, "exact_match": exact / n, "prefix_acc": acc / n,
               "edit_sim": sim / n,
               "nfe_per_token": nfe / max(1, toks), "ms_per_fill": statistics.median(ms), "empty_share": empty / n,
               "parse_ok": parsed / max(1, sum(parse_ok_files)),
               "code_parse_ok": code_parsed / max(1, sum(parse_ok_files)),
               "edit_sims": sims}  # per hole, in order, for paired comparisons of two checkpoints
        rows.append(row)
        print(f"{thr:>10.2f}{pthr:>8.2f}{floor:>6}{row['exact_match']:>8.3f}{row['prefix_acc']:>12.3f}"
              f"{row['edit_sim']:>10.3f}{row['nfe_per_token']:>11.3f}{row['ms_per_fill']:>9.1f}{row['empty_share']:>7.2f}{row['parse_ok']:>7.2f}{row['code_parse_ok']:>7.2f}",
              flush=True)
    res = {"model": str(eng.path), "holes": a.holes, "corpus": a.corpus, "all_files": a.all_files, "document": a.document, "repair": not a.no_repair, "initial_canvas": a.initial_canvas, "spread": a.spread, "n": len(cases), "parse_checked": sum(parse_ok_files), "line_stop": not a.no_line_stop, "rows": rows,
           "command": " ".join(sys.argv)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    if a.plot:
        from edit_engine.cli.plots import sweep_plot

        print(f"wrote {sweep_plot(res, a.plot)}", file=sys.stderr)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
