"""Checkpoints side by side on the commit policy's measures, from the folders scripts/candidate_eval.sh writes.

    python scripts/candidate_table.py DIR_A DIR_B [...] [--json out.json]

Prints one markdown table (a row per measure, a column per folder, the first column the baseline) and, with
``--json``, writes the same figures. The held-out rows come first: they are what a checkpoint is chosen on;
the benchmark rows report.
"""

from __future__ import annotations

import argparse
import json
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
]
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


def sampler_mismatches(folders: list[Path]) -> list[str]:
    """The benchmark files whose sampler settings differ between the folders: such columns do not compare (a
    training checkpoint without sampler.json runs at the engine's default, not the packaged point)."""
    out = []
    for name in sorted({r[1] for r in ROWS if r[1].startswith(("humaneval", "santacoder"))}):
        seen = {f.name: d.get("sampler") for f in folders if (d := _record(f, name)) is not None}
        if len({json.dumps(v, sort_keys=True) for v in seen.values()}) > 1:
            out.append(f"{name}: " + "; ".join(f"{k} {json.dumps(v, sort_keys=True)}" for k, v in seen.items()))
    return out


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
    for m in sampler_mismatches(folders):
        print(f"WARNING: sampler differs, these columns do not compare: {m}")
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
