"""Checkpoints side by side on the commit policy's measures, from the folders scripts/candidate_eval.sh writes.

    python scripts/candidate_table.py DIR_A DIR_B [...] [--json out.json]

Prints one markdown table (a row per measure, a column per folder, the first column the baseline), then each
folder's edit similarity paired against the baseline's over the same holes (mean difference, its standard error,
and on how many holes the fill is closer or farther), and, with ``--json``, writes the same figures. The held-out
rows come first: they are what a checkpoint is chosen on; the benchmark rows report.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

# (label, file, key, scale, format): scale 100 gives percent.
ROWS: list[tuple[str, str, str, float, str]] = [
    ("held-out masked CE (512)", "context_gap.json", "val_masked_ce", 1, "{:.3f}"),
    ("held-out context gap", "context_gap.json", "context_gap", 1, "{:+.3f}"),
    ("held-out extra corpus (EXTRA) masked CE", "context_gap_extra.json", "val_masked_ce", 1, "{:.3f}"),
    ("held-out lines, editor's path: exact match", "heldout_lines_document.json", "exact_match", 100, "{:.1f}%"),
    ("held-out lines, editor's path: prefix accuracy", "heldout_lines_document.json", "prefix_acc", 100, "{:.1f}%"),
    ("held-out lines, editor's path: edit similarity", "heldout_lines_document.json", "edit_sim", 100, "{:.1f}"),
    ("held-out lines, editor's path: code parse", "heldout_lines_document.json", "code_parse_ok", 100, "{:.1f}%"),
    ("held-out lines, editor's path: nfe / token", "heldout_lines_document.json", "nfe_per_token", 1, "{:.2f}"),
    # HumanEval-shaped holes in packages no checkpoint trained on (candidate_eval.sh with HELDOUT=DIR)
    ("held-out functions (HELDOUT), bare: exact match", "heldout_functions.json", "exact_match", 100, "{:.1f}%"),
    ("held-out functions (HELDOUT), bare: edit similarity", "heldout_functions.json", "edit_sim", 100, "{:.1f}"),
    ("held-out functions (HELDOUT), bare: code parse", "heldout_functions.json", "code_parse_ok", 100, "{:.1f}%"),
    ("held-out functions (HELDOUT), bare: nfe / token", "heldout_functions.json", "nfe_per_token", 1, "{:.2f}"),
]
# The files whose per-hole edit similarity is paired against the baseline's: sweep_commit JSON (its row's
# edit_sims, holes in order) and eval --out JSONL (by task_id).
PAIRED = ["heldout_functions.json", "heldout_lines_document.json"] + [
    f"{b}-{p}.jsonl" for b in ("humaneval-single", "santacoder-fim") for p in ("bare", "document")]
for _bench, _label, _metric in (("humaneval-single", "HumanEval single-line", ("pass@1", "pass_at_1")),
                                ("santacoder-fim", "SantaCoder-FIM Python", ("exact match", "exact_match"))):
    for _path, _how in (("bare", "bare"), ("document", "editor's path")):
        _file = f"{_bench}-{_path}.json"
        ROWS += [(f"{_label}, {_how}: {_metric[0]}", _file, _metric[1], 100, "{:.2f}%"),
                 (f"{_label}, {_how}: edit similarity", _file, "edit_sim", 100, "{:.1f}"),
                 (f"{_label}, {_how}: code parse", _file, "code_parse_ok", 100, "{:.1f}%"),
                 (f"{_label}, {_how}: nfe / token", _file, "nfe_per_token", 1, "{:.2f}")]


def _record(folder: Path, name: str) -> dict[str, Any] | None:
    p = folder / name
    text = p.read_text().strip() if p.is_file() else ""
    if not text:
        return None
    try:  # a JSON file (sweep_commit --json), or a command's output whose last line is the JSON object
        d: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError:
        d = json.loads(text.splitlines()[-1])
    return d


def value(folder: Path, name: str, key: str) -> float | None:
    d = _record(folder, name)
    if d is None:
        return None
    if "rows" in d:  # sweep_commit: its one row (one policy)
        d = d["rows"][0]
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) else None


def _sampler(d: dict[str, Any]) -> dict[str, Any] | None:
    """A result's sampler settings; results written before eval recorded pad_threshold or floor_ramp ran at their
    defaults."""
    s = d.get("sampler")
    return {"pad_threshold": 0.5, "floor_ramp": 0, **s} if isinstance(s, dict) else s


def sampler_mismatches(folders: list[Path]) -> list[str]:
    """The benchmark files whose sampler settings differ between the folders: such columns do not compare (a
    training checkpoint without sampler.json runs at the engine's default, not the packaged point)."""
    out = []
    for name in sorted({r[1] for r in ROWS if r[1].startswith(("humaneval", "santacoder"))}):
        seen = {f.name: _sampler(d) for f in folders if (d := _record(f, name)) is not None}
        if len({json.dumps(v, sort_keys=True) for v in seen.values()}) > 1:
            out.append(f"{name}: " + "; ".join(f"{k} {json.dumps(v, sort_keys=True)}" for k, v in seen.items()))
    return out


def per_hole(folder: Path, name: str) -> dict[str, float] | None:
    """Edit similarity per hole: keyed by task_id (eval JSONL) or by position (a sweep's one row)."""
    p = folder / name
    if not p.is_file():
        return None
    if name.endswith(".jsonl"):
        rows = [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()]
        return {r["task_id"]: float(r["edit_sim"]) for r in rows if "edit_sim" in r}
    d = _record(folder, name)
    sims = d["rows"][0].get("edit_sims") if d and d.get("rows") else None
    return {str(i): float(v) for i, v in enumerate(sims)} if sims else None


def paired(base: dict[str, float], other: dict[str, float]) -> dict[str, float] | None:
    """Mean and standard error of other - base over the holes both have, and the counts closer and farther."""
    keys = sorted(base.keys() & other.keys())
    if len(keys) < 2:
        return None
    diffs = [other[k] - base[k] for k in keys]
    mean = sum(diffs) / len(diffs)
    var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return {"n": len(keys), "mean": mean, "se": math.sqrt(var / len(diffs)),
            "closer": sum(d > 0 for d in diffs), "farther": sum(d < 0 for d in diffs)}


def paired_lines(folders: list[Path]) -> tuple[list[str], dict[str, dict[str, dict[str, float]]]]:
    lines: list[str] = []
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for name in PAIRED:
        base = per_hole(folders[0], name)
        if base is None:
            continue
        for f in folders[1:]:
            other = per_hole(f, name)
            r = paired(base, other) if other is not None else None
            if r is None:
                continue
            figures.setdefault(name, {})[f.name] = r
            lines.append(f"paired edit similarity, {name}: {f.name} - {folders[0].name} = {100 * r['mean']:+.1f} "
                         f"(SE {100 * r['se']:.1f}; closer on {r['closer']}, farther on {r['farther']}, of {r['n']})")
    return lines, figures


def table(folders: list[Path]) -> tuple[str, dict[str, dict[str, float | None]]]:
    figures: dict[str, dict[str, float | None]] = {}
    lines = ["| measure | " + " | ".join(f.name for f in folders) + " |",
             "|---|" + "---|" * len(folders)]
    for label, name, key, scale, fmt in ROWS:
        vals = [value(f, name, key) for f in folders]
        figures[label] = {f.name: v for f, v in zip(folders, vals, strict=True)}
        cells = ["-" if v is None else fmt.format(v * scale) for v in vals]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines), figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", help="folders written by scripts/candidate_eval.sh (baseline first)")
    ap.add_argument("--json", default="", help="write the figures here")
    a = ap.parse_args(argv)
    folders = [Path(f) for f in a.folders]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        ap.error(f"not a folder: {', '.join(missing)}")
    text, figures = table(folders)
    print(text)
    pl, pfig = paired_lines(folders)
    if pl:
        print()
        print("\n".join(pl))
    for m in sampler_mismatches(folders):
        print(f"WARNING: sampler differs, these columns do not compare: {m}")
    if a.json:
        Path(a.json).write_text(json.dumps({**figures, "paired_edit_similarity": pfig}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
