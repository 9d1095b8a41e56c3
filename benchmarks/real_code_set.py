"""Build the real-code benchmark: holes cut from pinned PyPI packages that no checkpoint trained on.

    python benchmarks/real_code_set.py --out runs/realcode          # then: edit-engine eval --benchmark real-code
                                                                    #   --data runs/realcode --split dev|test

The packaged model trained on every ``*.py`` file of the CPU machine's ``lib/python3.11`` (standard library and
site-packages), a GPU machine's Python (``/usr/lib/python3.12``, torch, jax, transformers and their
dependencies) and the packages of ``benchmarks/algorithm_corpus.sh`` v1 (``edit_engine/models/default/MODEL.md``).
The packages below are pure Python, in none of those, and not installed here; each is pinned to a version and
the sha256 of its wheel, so a download that differs stops the build. The split is by package: ``dev`` to tune
decoding rules on, ``test`` for reporting only.

Steps: ``pip download --no-deps`` each wheel into ``OUT/downloads``; extract its importable ``.py`` files of
200 B-300 kB (a file whose name is not a module name, e.g. a stray ``grammar.py pre-rewriting.py`` copy, is
left out; line ends normalised to ``\\n``) to ``OUT/files/PACKAGE/PATH``; keep the files that tree-sitter
parses without an error and Python's parser accepts; cut, per split, ``--per-kind`` holes of each kind
(``edit_engine.eval.real_code_holes``: line, expression, block) with a fixed seed, the split's packages taking
turns; give each case the ``--related`` files of its package that share the most identifiers with its document
(at most 300 kB together). Writes ``OUT/dev.jsonl``, ``OUT/test.jsonl`` (one case a line: ``id``, ``split``,
``package``, ``version``, ``path``, ``kind``, ``document`` (the file without the hole), ``offset`` (the cursor,
a character offset), ``hole``, ``line`` (the cursor's row), ``related`` (paths under ``OUT/files/PACKAGE``))
and ``OUT/manifest.json`` (the versions of pip, Python and tree-sitter, each download's file name, size and
sha256, the file and case counts, and the sha256 of each split file). Running it again with the same arguments
(and the same tree-sitter-python, which the manifest records) writes the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from edit_engine.eval.real_code_holes import KINDS, make_cases, usable


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str  # of the wheel pip downloads
    split: str


PACKAGES = (
    Package("marshmallow", "4.4.0", "03a882ff2eabb9a4e24b433c2949f359ef4d172a12fdc14cde10375fd55328b4", "dev"),
    Package("parsimonious", "0.11.0", "32e3818abf9f05b3b9f3b6d87d128645e30177e91f614d2277d88a0aea98fae2", "dev"),
    Package("schedule", "1.2.2", "5bef4a2a0183abf44046ae0d164cadcac21b1db011bdd8102e4a0c1e91e06a7d", "dev"),
    Package("glom", "25.12.0", "b9f21e77f71a6576a43864e85066b8cc3f0f778d0d50961563f8981377a6dcb1", "test"),
    Package("structlog", "26.1.0", "e081a26d6c373e6d201eca24eede26d8ffab07f88f477822e679183428d3d91e", "test"),
    Package("environs", "15.2.0", "3e460fda6b3c29ebf9add476f55f4977018d00071cac1a62f4399e35b8d28c7a", "test"),
    Package("python-slugify", "9.2.0", "7298dcfc65e9ccdf834b3c398f163af0d09a9a8fc1ee6a7b2dffd8d38bfb756e", "test"),
    Package("dataclasses-json", "0.6.7", "0dbf33f26c8d5305befd61b39d2b3414e8a407bedc2834dea9b8d642666fb40a", "test"),
)
SPLITS = ("dev", "test")
FILE_BYTES = (200, 300_000)  # the training corpus's own bounds on a file's size
SEED = 0


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(pkg: Package, dest: Path) -> Path:
    """The package's wheel in ``dest`` (pip download, no dependencies), its sha256 checked."""
    dest.mkdir(parents=True, exist_ok=True)
    norm = pkg.name.replace("-", "_")
    found = [p for p in dest.glob(f"{norm}-{pkg.version}-*.whl")]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "--dest", str(dest), f"{pkg.name}=={pkg.version}"], check=True)
        found = [p for p in dest.glob(f"{norm}-{pkg.version}-*.whl")]
    if len(found) != 1:
        raise SystemExit(f"expected one wheel of {pkg.name}=={pkg.version} in {dest}, found {found}")
    got = sha256(found[0])
    if got != pkg.sha256:
        raise SystemExit(f"{found[0].name}: sha256 {got} is not the pinned {pkg.sha256}")
    return found[0]


def sources(wheel: Path) -> dict[str, str]:
    """The wheel's importable ``.py`` files of 200 B-300 kB (path -> text, ``\\n`` line ends)."""
    out: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            parts = info.filename.split("/")
            if not info.filename.endswith(".py") or ".dist-info" in parts[0]:
                continue
            if not all(p.isidentifier() for p in parts[:-1]) or not parts[-1][:-3].isidentifier():
                continue
            if not FILE_BYTES[0] <= info.file_size <= FILE_BYTES[1]:
                continue
            text = z.read(info).decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            out[info.filename] = text
    return out


def build(out: Path, per_kind: int, related: int, seed: int) -> dict[str, object]:
    files_dir = out / "files"
    packages: list[dict[str, object]] = []
    texts: dict[str, dict[str, str]] = {}  # package -> path -> text
    for pkg in PACKAGES:
        wheel = download(pkg, out / "downloads")
        srcs = sources(wheel)
        for p, t in srcs.items():
            f = files_dir / pkg.name / p
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(t, encoding="utf-8")
        texts[pkg.name] = srcs
        packages.append({"name": pkg.name, "version": pkg.version, "split": pkg.split, "file": wheel.name,
                         "bytes": wheel.stat().st_size, "sha256": sha256(wheel), "files": len(srcs),
                         "files_cut": sum(usable(t) for t in srcs.values())})
    versions = {p.name: p.version for p in PACKAGES}
    counts: dict[str, dict[str, int]] = {}
    split_sha: dict[str, str] = {}
    for split in SPLITS:
        names = [p.name for p in PACKAGES if p.split == split]
        cases = make_cases(split, {n: texts[n] for n in names}, versions, per_kind, related, seed)
        counts[split] = {k: sum(c["kind"] == k for c in cases) for k in KINDS}
        path = out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), encoding="utf-8")
        split_sha[split] = sha256(path)
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=True)
    manifest = {
        "command": f"python benchmarks/real_code_set.py --out {out} --per-kind {per_kind} --related {related} "
                   f"--seed {seed}",
        "seed": seed, "per_kind": per_kind, "related": related,
        "pip": pip.stdout.split(" from ")[0].strip(), "python": platform.python_version(),
        "tree_sitter": metadata.version("tree-sitter"), "tree_sitter_python": metadata.version("tree-sitter-python"),
        "packages": packages, "cases": counts, "split_sha256": split_sha,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", required=True, help="output directory (e.g. runs/realcode)")
    p.add_argument("--per-kind", type=int, default=100, help="holes of each kind per split (default 100)")
    p.add_argument("--related", type=int, default=8, help="related files per case (default 8; 0 = none)")
    p.add_argument("--seed", type=int, default=SEED)
    a = p.parse_args(argv)
    if a.per_kind < 1 or a.related < 0:
        p.error("--per-kind must be >= 1 and --related >= 0")
    m = build(Path(a.out), a.per_kind, a.related, a.seed)
    for split, kinds in m["cases"].items():  # type: ignore[attr-defined]
        print(f"{split}: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) + f" -> {Path(a.out) / split}.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
