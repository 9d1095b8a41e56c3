"""Loading the public infilling benchmarks (evaluation only: never train or tune on them).

Two families, read unchanged from ``shared/benchmarks/`` beside the repository (or a directory given with
``--data``):

- HumanEval-infilling (Bavarian et al. 2022): ``prompt`` is the text before the hole, ``suffix`` the text after,
  ``canonical_solution`` the hole; scored by running ``test`` and ``check(entry_point)``.
- SantaCoder-FIM (Allal et al. 2023): one line removed from a program; scored by exact match. The stored
  ``prompt`` stops before the newline that ends the previous line and ``suffix`` starts after the newline that
  ends the hole's line, so the hole the model sees is ``prompt + "\\n" | hole | "\\n" + suffix`` (a line without
  its newline; with this join all 1,043 Python tasks parse with the canonical line in place).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

_C = TypeVar("_C")

HUMANEVAL_FILES = {
    "humaneval-single": "HumanEval-SingleLineInfilling.jsonl.gz",
    "humaneval-multi": "HumanEval-MultiLineInfilling.jsonl.gz",
    "humaneval-random": "HumanEval-RandomSpanInfilling.jsonl.gz",
    "humaneval-random-light": "HumanEval-RandomSpanInfillingLight.jsonl.gz",
}
SANTACODER = "santacoder-fim"
SANTACODER_FILE = "benchmark.jsonl.gz"
# Apply edit: marker snippets merged into files, from the next-edit cases or this package's sources (apply_set.py).
APPLY_BENCHMARKS = ("apply", "apply-synthetic")
# Next edit: the change after the user's recent edits (next_edit_set.py); next-edit-releases: cases from
# consecutive releases of PyPI packages (release_edits.py; built by benchmarks/release_edits.py);
# next-edit-elsewhere: the same releases, the next edit sought in the other open files (next_edit_elsewhere.py).
NEXT_EDIT_BENCHMARKS = ("next-edit", "next-edit-history", "next-edit-releases", "next-edit-elsewhere")
# Fills at the cursor on files of PyPI packages no checkpoint trained on (real_code.py; built by
# benchmarks/real_code_set.py).
REAL_CODE_BENCHMARKS = ("real-code",)
# What a person feels while typing: real code written top to bottom, suggestions accepted only where exactly
# right (typing_replay.py; built by benchmarks/typing_set.py).
TYPING_BENCHMARKS = ("typing",)
BENCHMARKS = (*HUMANEVAL_FILES, SANTACODER, *APPLY_BENCHMARKS, *NEXT_EDIT_BENCHMARKS, *REAL_CODE_BENCHMARKS,
              *TYPING_BENCHMARKS)
# Our language ids -> the benchmark's ``language`` field.
SANTACODER_LANGUAGES = {"python": "py", "javascript": "js", "java": "java"}
DATA_ENV = "EDIT_ENGINE_BENCHMARKS"


class BenchmarkError(ValueError):
    """A benchmark that cannot be loaded (unknown name, missing data); the message says why."""


@dataclass(frozen=True)
class Task:
    """One hole to fill. ``prefix`` and ``suffix`` are exactly what the engine is given."""

    task_id: str
    language: str  # python | javascript | java
    prefix: str
    suffix: str
    canonical: str  # the true hole
    test: str = ""  # HumanEval: the test code defining check(candidate)
    entry_point: str = ""  # HumanEval: the function under test
    single_line: bool = False  # the hole is (at most) one line

    @property
    def scored_by_execution(self) -> bool:
        return bool(self.test)

    def program(self, completion: str) -> str:
        """HumanEval: the program whose clean exit means the completion passes."""
        return (self.prefix + completion + self.suffix + "\n" + self.test + "\n"
                + f"check({self.entry_point})\n")


def repo_root() -> Path:
    """The directory holding the ``edit_engine`` package (the repository root in a checkout)."""
    return Path(__file__).resolve().parent.parent.parent


def data_dir_candidates() -> list[Path]:
    env = os.environ.get(DATA_ENV)
    root = repo_root()
    out = [Path(env)] if env else []
    # A checkout's ``../shared/benchmarks``; a copy of the tree that carries ``shared/`` inside it.
    out += [root.parent / "shared" / "benchmarks", root / "shared" / "benchmarks"]
    return out


def resolve_data_dir(data: str | Path | None = None) -> Path:
    """The benchmark directory: ``data`` if given, else $EDIT_ENGINE_BENCHMARKS, else ``../shared/benchmarks``
    next to the repository root (or ``shared/benchmarks`` inside it)."""
    if data is not None:
        d = Path(data)
        if not d.is_dir():
            raise BenchmarkError(f"benchmark directory {str(d)!r} does not exist")
        return d
    tried = data_dir_candidates()
    for d in tried:
        if d.is_dir():
            return d
    raise BenchmarkError("no benchmark directory found; tried " + ", ".join(map(str, tried))
                         + " (give --data DIR)")


def _read_jsonl_gz(path: Path) -> list[dict[str, object]]:
    if not path.is_file():
        raise BenchmarkError(f"benchmark file {str(path)!r} is missing")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_jsonl_cases(path: Path, make: Callable[[dict[str, Any]], _C], limit: int | None = None) -> list[_C]:
    """The cases ``make`` builds from the first ``limit`` records of a JSON-lines file (gzipped when its name
    ends in ``.gz``), in file order. A set that holds no case is a ``BenchmarkError``."""
    out: list[_C] = []
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            out.append(make(json.loads(line)))
            if limit is not None and len(out) >= limit:
                break
    if not out:
        raise BenchmarkError(f"{str(path)!r} holds no cases")
    return out


def load(name: str, data: str | Path | None = None, language: str = "python",
         limit: int | None = None) -> list[Task]:
    """The first ``limit`` tasks of benchmark ``name`` (file order; all when ``limit`` is None)."""
    if limit is not None and limit < 1:
        raise BenchmarkError("limit must be >= 1")
    d = resolve_data_dir(data)
    tasks: list[Task] = []
    if name in HUMANEVAL_FILES:
        if language != "python":
            raise BenchmarkError(f"{name} is Python only (got --language {language})")
        single = name == "humaneval-single"
        for r in _read_jsonl_gz(d / "human-eval-infilling" / HUMANEVAL_FILES[name]):
            tasks.append(Task(str(r["task_id"]), "python", str(r["prompt"]), str(r["suffix"]),
                              str(r["canonical_solution"]), str(r["test"]), str(r["entry_point"]), single))
            if limit is not None and len(tasks) >= limit:
                break
    elif name == SANTACODER:
        if language not in SANTACODER_LANGUAGES:
            raise BenchmarkError(f"{name} languages: {', '.join(SANTACODER_LANGUAGES)} (got {language!r})")
        code = SANTACODER_LANGUAGES[language]
        for r in _read_jsonl_gz(d / "santacoder-fim" / SANTACODER_FILE):
            if r["language"] != code:
                continue
            tasks.append(Task(str(r["name"]), language, str(r["prompt"]) + "\n", "\n" + str(r["suffix"]),
                              str(r["canonical_solution"]), single_line=True))
            if limit is not None and len(tasks) >= limit:
                break
    elif name in APPLY_BENCHMARKS or name in NEXT_EDIT_BENCHMARKS or name in REAL_CODE_BENCHMARKS:
        raise BenchmarkError(f"{name} is not an infilling benchmark: its cases come from eval.apply_set, "
                             "eval.next_edit_set or eval.real_code")
    else:
        raise BenchmarkError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    if not tasks:
        raise BenchmarkError(f"{name} ({language}) has no tasks in {d}")
    return tasks
