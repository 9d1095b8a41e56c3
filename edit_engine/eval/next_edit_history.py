"""Next-edit cases cut from a local git repository's history (``edit-engine eval --benchmark next-edit-history``),
by the rule the shared next-edit set documents (its README, "Construction rule"): for each non-merge commit and
each modified ``.py`` file with 2 to 6 hunks (``git diff -U0``, each changing at most 12 rows, 40 in all), the
cases k = 1..n-1 are the parent's file with the first k hunks applied, those hunks as unified diffs with 3
context rows (each against the file as the ones before left it), the cursor at the end of hunk k, and the next
hunk as the target, in the region ``[target - 5, target end + 10)``; a target that changes only whitespace or
comments is dropped, and at most 2 cases are kept per commit (a seeded choice).

A development set that is not the benchmark: this repository's own history (the default) is what the next-edit
thresholds are set on (``edits/next_edit.py``, ``MODEL_MARGIN``), so the benchmark stays held out.
"""

from __future__ import annotations

import difflib
import random
import re
import subprocess
from pathlib import Path
from typing import Any

from edit_engine.edits.patterns import Hunk, parse_diff
from edit_engine.eval.benchmarks import BenchmarkError, repo_root
from edit_engine.eval.next_edit_set import NextEditCase, case_from_json

MAX_HUNKS, MAX_HUNK_ROWS, MAX_FILE_ROWS = 6, 12, 40
MAX_FILE_BYTES = 60_000
PER_COMMIT = 2
SEED = 20250611


def _git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, encoding="utf-8",
                       errors="replace", check=False)
    return r.stdout


def _code_tokens(rows: tuple[str, ...] | list[str]) -> list[str]:
    """A hunk side's tokens without comments and whitespace (a target equal on both sides is cosmetic)."""
    return re.sub(r"#.*", "", "\n".join(rows)).split()


def _usable(hunks: list[Hunk]) -> bool:
    sizes = [sum(k != " " for k, _ in h.rows) for h in hunks]
    return 2 <= len(hunks) <= MAX_HUNKS and max(sizes) <= MAX_HUNK_ROWS and sum(sizes) <= MAX_FILE_ROWS


def file_cases(case_id: str, path: str, before: str, hunks: list[Hunk]) -> list[dict[str, Any]]:
    """The cases of one file's hunks (dicts in the shared set's fields)."""
    states, starts = [before.splitlines(keepends=True)], []
    shift = 0
    for h in hunks:
        rows = states[-1]
        at = h.old_start + shift
        removed = [t for k, t in h.rows if k == "-"]
        added = [t + "\n" for k, t in h.rows if k == "+"]
        if [x.rstrip("\n") for x in rows[at : at + len(removed)]] != removed:
            return []  # the diff does not apply as read (a missing final newline, an odd encoding)
        states.append(rows[:at] + added + rows[at + len(removed) :])
        starts.append(at)
        shift += len(added) - len(removed)
    out = []
    for k in range(1, len(hunks)):
        doc = states[k]
        target = hunks[k]
        removed = [t for kind, t in target.rows if kind == "-"]
        added = [t + "\n" for kind, t in target.rows if kind == "+"]
        if _code_tokens(removed) == _code_tokens([x.rstrip("\n") for x in added]):
            continue
        last_added = [t for kind, t in hunks[k - 1].rows if kind == "+"]
        line = starts[k - 1] + max(len(last_added) - 1, 0)
        col = len(last_added[-1]) if last_added else 0
        at = starts[k]
        first, stop = max(0, at - 5), min(len(doc), at + len(removed) + 10)
        after = doc[:at] + added + doc[at + len(removed) :]
        history = ["".join(difflib.unified_diff(states[i], states[i + 1], f"a/{path}", f"b/{path}", n=3))
                   for i in range(k)]
        out.append({"id": f"{case_id}#{k}", "document": "".join(doc), "cursor": {"line": line, "col": col},
                    "history": history, "region": {"start_line": first, "end_line": stop},
                    "region_before": "".join(doc[first:stop]),
                    "region_after": "".join(after[first : stop + len(added) - len(removed)]),
                    "far": at - line > 40})
    return out


def history_cases(repo: str | Path | None = None, limit: int | None = None) -> list[NextEditCase]:
    """Cases from ``repo``'s history (default: the repository this package is in), newest commits first."""
    root = Path(repo) if repo is not None else repo_root()
    commits = _git(root, "log", "--no-merges", "--format=%H").split()
    if not commits:
        raise BenchmarkError(f"{str(root)!r} is not a git repository with commits")
    rng = random.Random(SEED)
    out: list[NextEditCase] = []
    for c in commits:
        parent = _git(root, "rev-parse", "--verify", "--quiet", c + "^").strip()
        if not parent:
            continue
        found: list[dict[str, Any]] = []
        for status in _git(root, "diff", "--name-status", "--no-renames", parent, c).splitlines():
            kind, _, path = status.partition("\t")
            if kind != "M" or not path.endswith(".py"):
                continue
            before = _git(root, "show", f"{parent}:{path}")
            if "\r" in before or len(before.encode()) > MAX_FILE_BYTES or "@generated" in before[:2000]:
                continue
            diff = _git(root, "diff", "-U0", "--diff-algorithm=myers", "--no-renames", parent, c, "--", path)
            try:
                hunks = parse_diff(diff)
            except ValueError:
                continue
            if _usable(hunks):
                found += file_cases(f"{c[:12]}:{path}", path, before, hunks)
        rng.shuffle(found)
        out += [case_from_json(x) for x in found[:PER_COMMIT]]
        if limit is not None and len(out) >= limit:
            return out[:limit]
    if not out:
        raise BenchmarkError(f"no next-edit cases in the history of {str(root)!r}")
    return out
