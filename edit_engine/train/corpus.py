"""The training corpus: Python source on this machine (standard library and installed packages).

Reproducible from a command: the file list is every ``*.py`` under the given roots (default: the base
interpreter's standard library directory, which contains its site-packages), sorted, filtered by size, split
into train/validation by a hash of the path relative to its root. Paths under any ``benchmarks`` folder of the
project's ``shared/`` directory are never included.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

MIN_BYTES = 200
MAX_BYTES = 300_000
VAL_PERCENT = 2


def default_roots() -> list[Path]:
    """The standard library and the installed packages (site-packages: inside the standard library's folder
    for a plain interpreter, elsewhere in a virtual environment); a root inside another is dropped."""
    paths = sysconfig.get_paths()
    roots: list[Path] = []
    for key in ("stdlib", "purelib", "platlib"):
        p = Path(paths[key]).resolve()
        if p.is_dir() and not any(p == r or r in p.parents for r in roots):
            roots = [r for r in roots if p not in r.parents] + [p]
    return roots


def _excluded(path: Path) -> bool:
    parts = path.parts
    return "benchmarks" in parts and "shared" in parts


@dataclass(frozen=True)
class CorpusFile:
    path: Path
    rel: str  # path relative to its root (what the split hashes)
    size: int
    group: str  # top-level package or stdlib module, for balancing
    extra: bool = False  # from an extra root (``TrainConfig.extra_corpus``): sampled at its own fixed share

    @property
    def split(self) -> str:
        h = int(hashlib.sha1(self.rel.encode()).hexdigest()[:8], 16)
        return "val" if h % 100 < VAL_PERCENT else "train"


def list_files(roots: list[Path] | None = None, extra: bool = False) -> list[CorpusFile]:
    """Every corpus file under ``roots`` (default: ``default_roots``); ``extra`` marks them as an extra corpus."""
    out: list[CorpusFile] = []
    for root in roots or default_roots():
        root = root.resolve()
        if _excluded(root):
            raise ValueError(f"refusing to train on evaluation data: {root}")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            d = Path(dirpath)
            if _excluded(d):
                dirnames[:] = []
                continue
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                p = d / name
                try:
                    size = p.stat().st_size
                except OSError:
                    continue
                if not MIN_BYTES <= size <= MAX_BYTES:
                    continue
                rel = str(p.relative_to(root))
                parts = rel.split(os.sep)
                if root.name == "site-packages":
                    group = parts[0] if len(parts) > 1 else "site-packages"
                else:
                    group = parts[1] if parts[0] == "site-packages" and len(parts) > 1 else "stdlib"
                out.append(CorpusFile(p, rel, size, group, extra))
    return out


def read_text(f: CorpusFile) -> str | None:
    try:
        return f.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def sampling_weights(files: list[CorpusFile], max_group_share: float = 0.12) -> list[float]:
    """Per-file weights ∝ size, with no package group above ``max_group_share`` of the total."""
    by_group: dict[str, float] = {}
    for f in files:
        by_group[f.group] = by_group.get(f.group, 0.0) + f.size
    total = sum(by_group.values())
    cap = max_group_share * total
    scale = {g: min(1.0, cap / s) for g, s in by_group.items()}
    return [f.size * scale[f.group] for f in files]


MIN_EXTRA_SHARE = 1e-6  # smaller shares underflow the per-byte weight (TrainConfig refuses them)


def mixed_weights(files: list[CorpusFile], extra_share: float = 0.0) -> list[float]:
    """Per-file sampling weights: the ordinary files by ``sampling_weights``; when ``extra_share`` > 0 and
    there are extra files, those (weighted by size, no group cap) take ``extra_share`` of the total."""
    base_w = iter(sampling_weights([f for f in files if not f.extra]))
    w = [0.0 if f.extra else next(base_w) for f in files]
    base_total, extra_total = sum(w), sum(f.size for f in files if f.extra)
    if base_total <= 0:  # nothing ordinary to draw: every file by size
        return [float(f.size) for f in files]
    if extra_share > 0 and extra_total > 0:
        k = extra_share / (1 - extra_share) * base_total / extra_total  # weight per byte that gives the share
        w = [f.size * k if f.extra else x for f, x in zip(files, w, strict=True)]
    return w


def manifest_digest(files: list[CorpusFile]) -> str:
    h = hashlib.sha1()
    for f in files:
        h.update(f"{f.rel}\t{f.size}\n".encode())
    return h.hexdigest()[:16]
