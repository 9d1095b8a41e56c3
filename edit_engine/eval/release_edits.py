"""Next-edit cases from consecutive releases of PyPI packages (``edit-engine eval --benchmark next-edit-releases
--data runs/release_edits``), built by ``benchmarks/release_edits.py``: a held-out set in the shared next-edit
set's format (``../shared/benchmarks/next-edit/README.md``: document, cursor, history as unified diffs, region
before and after), scored by ``next_edit_set`` unchanged.

For each ``.py`` file changed between two releases (both versions UTF-8, at most ``MAX_FILE_BYTES``, no ``\\r``,
a missing final newline added), the hunks are ``difflib``'s line opcodes (``SequenceMatcher``, no junk
heuristic), in position order. For hunk k+1 (the target) the cases take:

- *document*: the old file with hunks 1..k applied;
- *history*: hunks j..k, each a unified diff with 3 context lines against the file as the hunks before it left
  it (``a/PATH`` / ``b/PATH``), at most ``MAX_HISTORY`` of them and none changing more than ``MAX_HUNK_ROWS``
  rows (the window starts after a larger one); at least hunk k;
- *cursor*: the end of hunk k's last added line (column 0 of the line in its place when it only deletes);
- *target*: hunk k+1, changing at most ``MAX_HUNK_ROWS`` rows, not only whitespace or comments, starting at
  most ``MAX_GAP`` rows below the cursor (nearby); region ``[start - 5, end + 10)`` as in the shared set;
  ``far`` when it starts more than 40 rows below the cursor.

Selection: at most ``PER_FILE`` cases per file version pair and ``PER_PACKAGE`` per package (seeded choices),
identical (document, region after) pairs kept once, ordered by id.
"""

from __future__ import annotations

import difflib
import gzip
import json
import random
import re
import zipfile
from pathlib import Path
from typing import Any

from edit_engine.eval.benchmarks import BenchmarkError
from edit_engine.eval.next_edit_set import NextEditCase, read_cases

CASES_FILE = "cases.jsonl.gz"
MANIFEST_FILE = "manifest.json"
MAX_FILE_BYTES = 60_000
MAX_HUNK_ROWS = 12  # removed + added rows of one hunk, as the shared set
MAX_HISTORY = 5  # diffs in a history, the shared set's longest
MAX_GAP = 100  # rows from the cursor down to the target's start
FAR = 40
BEFORE, AFTER = 5, 10  # region rows around the target
PER_FILE = 3
PER_PACKAGE = 60
SEED = 20261204


def _code_tokens(rows: list[str]) -> list[str]:
    """A hunk side's tokens without comments and whitespace (a target equal on both sides is cosmetic)."""
    return re.sub(r"#.*", "", "".join(rows)).split()


def usable_text(text: str) -> str | None:
    """The file as cases use it (a final newline added), or None when it is left out."""
    if "\r" in text or len(text.encode("utf-8")) > MAX_FILE_BYTES or len(text.splitlines()) != text.count("\n") + (
            not text.endswith("\n")):
        return None  # over the size limit, or holding a line break other than \n (splitlines would disagree)
    return text if text.endswith("\n") or not text else text + "\n"


def file_cases(case_id: str, path: str, before: str, after: str) -> list[dict[str, Any]]:
    """The cases of one file's change (dicts in the shared set's fields)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    ops = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False)
           .get_opcodes() if tag != "equal"]

    def state(k: int) -> list[str]:  # the old file with the first k hunks applied
        return a if k == 0 else b[: ops[k - 1][3]] + a[ops[k - 1][1] :]

    def size(h: tuple[int, int, int, int]) -> int:
        return h[1] - h[0] + h[3] - h[2]

    out = []
    for k in range(1, len(ops)):
        i1, i2, j1, j2 = ops[k]
        removed, added = a[i1:i2], b[j1:j2]
        if size(ops[k]) > MAX_HUNK_ROWS or _code_tokens(removed) == _code_tokens(added):
            continue
        w = k
        while w > 0 and k - w < MAX_HISTORY and size(ops[w - 1]) <= MAX_HUNK_ROWS:
            w -= 1
        if w == k:
            continue
        prev = ops[k - 1]
        last_added = b[prev[2] : prev[3]]
        line = prev[2] + max(len(last_added) - 1, 0)
        col = len(last_added[-1].rstrip("\n")) if last_added else 0
        at = i1 + prev[3] - prev[1]  # the target's first row in the document
        if at - line > MAX_GAP:
            continue
        doc, new = state(k), state(k + 1)
        first, stop = max(0, at - BEFORE), min(len(doc), at + len(removed) + AFTER)
        history = ["".join(difflib.unified_diff(state(i), state(i + 1), f"a/{path}", f"b/{path}", n=3))
                   for i in range(w, k)]
        out.append({"id": f"{case_id}#{k}", "path": path, "document": "".join(doc),
                    "cursor": {"line": line, "col": col}, "history": history,
                    "region": {"start_line": first, "end_line": stop}, "region_before": "".join(doc[first:stop]),
                    "region_after": "".join(new[first : stop + len(added) - len(removed)]),
                    "target_diff": "".join(difflib.unified_diff(doc, new, f"a/{path}", f"b/{path}", n=3)),
                    "far": at - line > FAR})
    return out


def wheel_sources(wheel: Path) -> dict[str, str]:
    """The wheel's ``.py`` files that decode as UTF-8, by path inside it."""
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            top = info.filename.split("/", 1)[0]
            if not info.filename.endswith(".py") or top.endswith((".dist-info", ".data")):
                continue
            try:
                out[info.filename] = z.read(info).decode("utf-8")
            except UnicodeDecodeError:
                continue
    return out


def pair_cases(package: str, old: tuple[str, dict[str, str]], new: tuple[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Cases of every ``.py`` file changed between two releases (version, {path: text}), at most ``PER_FILE``
    per file (a seeded choice), in path order."""
    (va, files_a), (vb, files_b) = old, new
    out: list[dict[str, Any]] = []
    for path in sorted(set(files_a) & set(files_b)):
        ta, tb = usable_text(files_a[path]), usable_text(files_b[path])
        if not path.endswith(".py") or ta is None or tb is None or ta == tb:
            continue
        got = file_cases(f"{package}@{va}..{vb}:{path}", path, ta, tb)
        random.Random(f"{SEED}:{package}:{va}:{vb}:{path}").shuffle(got)
        for c in sorted(got[:PER_FILE], key=lambda c: c["id"]):
            out.append({**c, "package": package, "old_version": va, "new_version": vb})
    return out


def dedupe(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cases with identical (document, region after) pairs kept once, in their order."""
    seen: set[tuple[str, str]] = set()
    unique = []
    for c in cases:
        key = (c["document"], c["region_after"])
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def select(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most ``PER_PACKAGE`` cases per package (a seeded choice), duplicates dropped, ordered by id."""
    unique = dedupe(cases)
    out = []
    for pkg in sorted({c["package"] for c in unique}):
        mine = [c for c in unique if c["package"] == pkg]
        random.Random(f"{SEED}:{pkg}").shuffle(mine)
        out += mine[:PER_PACKAGE]
    return sorted(out, key=lambda c: c["id"])


def write_cases(cases: list[dict[str, Any]], out_dir: Path) -> Path:
    """``OUT/cases.jsonl.gz`` (byte-identical for the same cases: no gzip timestamp)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / CASES_FILE
    data = "".join(json.dumps(c, sort_keys=True) + "\n" for c in cases).encode("utf-8")
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(data)
    return path


def load_finals(data: str | Path | None = None) -> dict[str, str]:
    """Case id -> the file as the case's release left it, read from the wheels the set downloaded (cases whose
    wheel is gone, or whose file is not usable there, are left out)."""
    root = Path(data if data is not None else "runs/release_edits")
    try:
        manifest = json.loads((root / MANIFEST_FILE).read_text(encoding="utf-8"))
        with gzip.open(root / CASES_FILE, "rt", encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
    except (OSError, ValueError):
        return {}
    wheels = {(d["package"], d["version"]): root / "downloads" / d["file"] for d in manifest.get("downloads", [])}
    sources: dict[tuple[str, str], dict[str, str]] = {}
    out = {}
    for r in records:
        key = (str(r.get("package", "")), str(r.get("new_version", "")))
        wheel = wheels.get(key)
        if wheel is None or not wheel.is_file():
            continue
        if key not in sources:
            sources[key] = wheel_sources(wheel)
        text = sources[key].get(str(r.get("path", "")))
        final = usable_text(text) if text is not None else None
        if final is not None:
            out[str(r["id"])] = final
    return out


def load_cases(data: str | Path | None = None, limit: int | None = None) -> list[NextEditCase]:
    """The first ``limit`` cases of a built set (``data``: the directory ``benchmarks/release_edits.py --out``
    wrote; default ``runs/release_edits``)."""
    path = Path(data if data is not None else "runs/release_edits") / CASES_FILE
    if not path.is_file():
        raise BenchmarkError(f"release next-edit cases not found at {str(path)!r}; build them with "
                             "python benchmarks/release_edits.py --out DIR")
    return read_cases(path, limit)
