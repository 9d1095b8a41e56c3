"""Build a shipped background model from the sources listed in ``sources/<language>.toml``.

    python -m edit_engine.memory.build --language python --out edit_engine/memory/models/

Downloads each listed source with the ecosystem's own client (``pip download --no-deps``, ``npm pack``,
``apt-get download`` + ``dpkg-deb -x``), checks its declared licence against an allow-list, extracts the
source files of the language (skipping minified or generated files, recognised by very long lines, and
exact duplicates), tokenizes them and writes ``<language>.npz`` plus ``<language>.json`` (what went in).
Downloads are cached (``--cache``), so rebuilding with other settings is offline. The pruning settings
(``min_count``, ``max_mb``) are the sources file's, so the command alone rebuilds the shipped model byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import tomllib

from .lexer import tokenize
from .ngram import build_static

__all__ = ["main", "EXCLUDED", "load_sources", "iter_source_files"]

SOURCES_DIR = Path(__file__).with_name("sources")

# Evaluation data: never part of a background model.
EXCLUDED = frozenset({
    "marshmallow", "parsimonious", "schedule", "glom", "structlog", "environs", "python-slugify",
    "dataclasses-json", "yargs-parser", "commander", "minimist", "semver", "uuid", "zod", "chalk",
    "golang-github-google-uuid-dev", "golang-github-pkg-errors-dev", "golang-github-mattn-go-isatty-dev",
    "librust-semver-dev", "librust-smallvec-dev", "librust-bitflags-dev", "librust-log-dev",
})

_ALLOWED_LICENCES = ("MIT", "BSD", "APACHE", "ISC", "PSF", "PYTHON SOFTWARE FOUNDATION", "MPL-2.0",
                     "MOZILLA PUBLIC LICENSE 2.0")
_FORBIDDEN_LICENCES = ("GPL", "AGPL", "LGPL")

EXTENSIONS = {
    "python": (".py",),
    "javascript": (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".tsx", ".jsx"),
    "go": (".go",),
    "rust": (".rs",),
}

MAX_LINE = 400          # a longer line marks a minified or generated file
MAX_FILE_BYTES = 400_000


def _benchmark_exclusions() -> set[str]:
    """Package names of the evaluation sets under ``benchmarks/`` (``Package(...)`` calls and ``typing_sources.toml``)."""
    names: set[str] = set()
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        for fname in ("typing_set.py", "real_code_set.py"):
            f = root / "benchmarks" / fname
            if f.is_file():
                text = f.read_text(errors="replace")
                names |= set(re.findall(r"""\b(?:Source|Package)\(\s*["']([^"']+)["']""", text))
        table = root / "benchmarks" / "typing_sources.toml"
        if table.is_file():
            names |= {row["name"] for row in tomllib.loads(table.read_text()).get("source", [])}
    return names


def load_sources(language: str) -> dict[str, object]:
    """The parsed ``sources/<language>.toml``."""
    return tomllib.loads((SOURCES_DIR / f"{language}.toml").read_text())


def _check_licence(name: str, declared: str, found: str) -> None:
    text = (declared + " " + found).upper()
    bad = [w for w in _FORBIDDEN_LICENCES if re.search(rf"\b{w}\b", text)]
    if bad or not any(a in text for a in _ALLOWED_LICENCES):
        raise SystemExit(f"{name}: licence not allowed or unknown: declared {declared!r}, found {found!r}")


def _run(cmd: list[str], cwd: Path) -> None:
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def _fetch(kind: str, src: dict[str, str], cache: Path) -> tuple[Path, str]:
    """Download one source into ``cache`` (once); returns the unpacked directory and its licence text."""
    name = src["name"]
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{name}-{src.get('version', 'deb')}")
    dest = cache / slug
    dl = cache / (slug + ".dl")
    if not dest.is_dir():
        dl.mkdir(parents=True, exist_ok=True)
        if kind == "pypi":
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                  "--python-version", "3.12", "--platform", "manylinux2014_x86_64",
                  "--platform", "manylinux_2_17_x86_64", "--platform", "any",
                  "-d", str(dl), f"{name}=={src['version']}"], cache)
            wheel = next(dl.glob("*.whl"))
            with zipfile.ZipFile(wheel) as z:
                z.extractall(dest)
        elif kind == "npm":
            _run(["npm", "pack", "--silent", f"{name}@{src['version']}"], dl)
            tgz = next(dl.glob("*.tgz"))
            with tarfile.open(tgz) as t:
                t.extractall(dest, filter="data")
        elif kind == "deb":
            _run(["apt-get", "download", name], dl)
            deb = next(dl.glob("*.deb"))
            _run(["dpkg-deb", "-x", str(deb), str(dest)], cache)
        else:
            raise SystemExit(f"unknown source kind {kind!r}")
    return dest, _found_licence(kind, dest)


def _found_licence(kind: str, dest: Path) -> str:
    if kind == "pypi":
        for meta in dest.glob("*.dist-info/METADATA"):
            lines = meta.read_text(errors="replace").splitlines()
            keep = [ln for ln in lines if ln.startswith(("License", "Classifier: License"))]
            return " | ".join(ln[:200] for ln in keep)
    if kind == "npm":
        pkg = dest / "package" / "package.json"
        if pkg.is_file():
            return str(json.loads(pkg.read_text()).get("license", ""))
    if kind == "deb":
        for cp in dest.glob("usr/share/doc/*/copyright"):
            lic = re.findall(r"^License: *(.+)$", cp.read_text(errors="replace"), flags=re.M)
            return " | ".join(sorted(set(lic)))
    return ""


def iter_source_files(root: Path, language: str) -> Iterator[tuple[Path, str]]:
    """Source files of ``language`` under ``root``, skipping minified/generated files."""
    exts = EXTENSIONS[language]
    # Library code first, tests last, so a per-source token cap keeps the former.
    paths = sorted(root.rglob("*"), key=lambda p: (any(x in ("tests", "test", "testing") for x in p.parts), p))
    for path in paths:
        if not path.name.endswith(exts) or path.name.endswith((".min.js", ".bundle.js")):
            continue
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if not text.strip() or max(map(len, text.splitlines() or [""])) > MAX_LINE:
            continue
        yield path, text


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: fetch, extract, count, prune and save one language's model."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--language", required=True, choices=sorted(EXTENSIONS))
    ap.add_argument("--out", default=str(Path(__file__).with_name("models")))
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "edit_engine_memory"))
    ap.add_argument("--order", type=int, default=4)
    ap.add_argument("--min-count", type=int, nargs="+",
                    help="smallest count kept per context length (default: the sources file's min_count, else 2s)")
    ap.add_argument("--max-mb", type=float, help="size budget of the saved model (default: the sources file's max_mb)")
    ap.add_argument("--max-source-tokens", type=int, default=1_500_000,
                    help="tokens taken from one source at most, so no single project dominates")
    ap.add_argument("--limit-tokens", type=int, default=0, help="stop reading sources after this many")
    args = ap.parse_args(argv)

    spec = load_sources(args.language)
    kind = str(spec["kind"])
    excluded = EXCLUDED | _benchmark_exclusions()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    seen: set[bytes] = set()
    streams: list[list[str]] = []
    report: list[dict[str, object]] = []
    n_tokens = 0
    t0 = time.perf_counter()
    sources = spec["source"]
    assert isinstance(sources, list)
    for src in sources:
        if src["name"] in excluded:
            print(f"skip {src['name']}: evaluation data", file=sys.stderr)
            continue
        dest, found = _fetch(kind, src, cache)
        _check_licence(src["name"], src["licence"], found)
        root = dest / str(spec.get("subdir", ""))
        files = toks = 0
        for _path, text in iter_source_files(root, args.language):
            digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            if digest in seen:
                continue
            seen.add(digest)
            tk = tokenize(text, args.language)
            streams.append(tk)
            files += 1
            toks += len(tk)
            if toks >= args.max_source_tokens:
                break
        n_tokens += toks
        version = src.get("version") or _deb_version(dest)
        report.append({"name": src["name"], "version": version, "licence": src["licence"],
                       "licence_found": found, "files": files, "tokens": toks})
        print(f"{src['name']}: {files} files, {toks} tokens", file=sys.stderr)
        if args.limit_tokens and n_tokens >= args.limit_tokens:
            break
    print(f"total {n_tokens} tokens, read in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    listed = spec.get("min_count", [])
    assert isinstance(listed, list)
    mins = (args.min_count or [int(x) for x in listed])[: args.order]
    mins += [2] * (args.order - len(mins))
    listed_mb = spec.get("max_mb", 12.0)
    assert isinstance(listed_mb, int | float)
    max_mb = float(args.max_mb if args.max_mb is not None else listed_mb)
    model = build_static(streams, args.order, mins, max_bytes=int(max_mb * 1e6))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / f"{args.language}.npz")
    meta = {"language": args.language, "order": args.order, "tokens": n_tokens, "vocab": len(model.vocab),
            "bytes": model.nbytes(), "min_count": model.min_counts(), "max_mb": max_mb, "sources": report}
    (out / f"{args.language}.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out / (args.language + '.npz')}: {model.nbytes() / 1e6:.1f} MB, "
          f"{time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


def _deb_version(dest: Path) -> str:
    for cl in dest.glob("usr/share/doc/*/changelog.Debian.gz"):
        import gzip

        first = gzip.open(cl, "rt", errors="replace").readline()
        m = re.search(r"\(([^)]+)\)", first)
        if m:
            return m.group(1)
    return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
