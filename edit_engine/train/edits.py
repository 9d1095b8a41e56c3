"""Edit examples for the edit model: real changes between package releases and synthetic ones made with tree-sitter.

An example is one row's rewrite in the edit prompt (``engine.edit_prompt``): the recent changes, the row as it
stands, the file around it; the hole is the row's new text. Two sources, both reproducible by a command:

- **real**: the cases of ``benchmarks/release_edits.py --set train`` (consecutive releases of PyPI packages that
  are in no evaluation set): the target hunk's first change that replaces one row by one to three rows, with
  the case's history diffs as the changes;
- **synthetic** (``synthetic_cases``), over the training corpus's files, with tree-sitter's Python tree, three
  kinds of repeated change, each shown at one or two sites with the next site as the target:
  ``rename`` (an identifier used on three or more rows of one function renamed), ``call`` (the same change at
  the calls of one callee in a file: a keyword argument added, the callee renamed) and ``signature`` (a
  parameter added to a function and its argument to the calls of it in the file).

A share of ``KEEP_SHARE`` examples shows a row that does not change (the hole is the row as it stands), so the
model also learns when the changes do not reach a row.

    python -m edit_engine.train.edits --releases runs/edit_train_releases --synthetic 40000 \\
        --out runs/edit_examples                       # examples.npz and manifest.json

The examples are token ids (the packaged model's tokenizer), stored flat (``examples.npz``), read by
``edit-engine train --edits runs/edit_examples``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edit_engine.edits import edit_prompt, patterns
from edit_engine.model.interfaces import TextTokenizer
from edit_engine.train import corpus
from edit_engine.train.data import Example

KEEP_SHARE = 0.15  # examples whose row stays as it is
MAX_NEW_ROWS = 3
EXAMPLES_FILE = "examples.npz"
MANIFEST_FILE = "manifest.json"
MAX_HOLE_TOKENS = 96
SEED = 20261204
_KEYWORDS = frozenset("""False None True and as assert async await break class continue def del elif else except
finally for from global if import in is lambda nonlocal not or pass raise return try while with yield self cls
match case print len str int float list dict set tuple object type super range isinstance""".split())


@dataclass(frozen=True)
class EditCase:
    """A row to rewrite after a history: the file as it stands, the changes (removed rows, added rows) oldest
    first, the target row's index and its new text (one to ``MAX_NEW_ROWS`` rows joined by newlines)."""

    document: str
    changes: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
    row: int
    new: str
    source: str  # real | rename | call | signature


def example(tok: TextTokenizer, case: EditCase, max_prefix: int, max_suffix: int,
            keep_row: int | None = None) -> Example | None:
    """The case's example (``keep_row``: that row as it stands instead of the target's rewrite), or None when the
    row is blank or the new text does not keep the row's indentation."""
    lines = case.document.split("\n")
    row = case.row if keep_row is None else keep_row
    if not 0 <= row < len(lines) or not lines[row].strip():
        return None
    old = lines[row]
    indent = old[: len(old) - len(old.lstrip())]
    new = old if keep_row is not None else case.new
    if not new.startswith(indent) or not new[len(indent):].strip():
        return None
    above = "".join(ln + "\n" for ln in lines[:row]) + indent
    below = "\n" + "\n".join(lines[row + 1 :])
    p_ids, s_ids = edit_prompt.prompt_ids(tok, case.changes, old.strip(), above, below, max_prefix, max_suffix)
    hole = tok.encode(new[len(indent):].rstrip())
    if not hole or len(hole) > MAX_HOLE_TOKENS:
        return None
    return Example(p_ids, hole, s_ids, "keep" if keep_row is not None else case.source)


# ---------------------------------------------------------------------------------------------------- real cases
def real_cases(path: Path) -> Iterator[EditCase]:
    """The cases of a release set (``cases.jsonl.gz``) as edit cases: the target's first change of one row."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            c = json.loads(line)
            try:
                hist = [ch for k, d in enumerate(c["history"]) for ch in patterns.changes(patterns.parse_diff(d), k)]
                target = patterns.changes(patterns.parse_diff(c["target_diff"]), 0)
            except ValueError:
                continue
            ch = next((t for t in target if len(t.removed) == 1 and 1 <= len(t.added) <= MAX_NEW_ROWS), None)
            if ch is None:
                continue
            yield EditCase(c["document"], tuple((h.removed, h.added) for h in hist), ch.old_line,
                           "\n".join(ch.added), "real")


# ---------------------------------------------------------------------------------------------------- synthetic
_SUFFIXES = ("_list", "_count", "_value", "s", "_id", "2", "_map", "_name", "_data", "_new", "_obj", "_len")
_PREFIXES = ("new_", "old_", "tmp_", "my_", "_", "raw_", "num_", "is_", "the_", "all_")
_KW_NAMES = ("timeout", "strict", "default", "verbose", "encoding", "key", "limit", "force", "check", "name",
             "retries", "cache", "copy", "mode", "level", "context")
_KW_VALUES = ("None", "True", "False", "0", "1", "-1", "''", "self", "None", "10")


def _new_name(rng: random.Random, name: str, words: Sequence[str]) -> str:
    r = rng.random()
    if r < 0.35:
        return name + rng.choice(_SUFFIXES)
    if r < 0.6:
        return rng.choice(_PREFIXES) + name.lstrip("_")
    if r < 0.75 and "_" in name.strip("_"):
        parts = [p for p in name.split("_") if p]
        return parts[0] + "".join(p.title() for p in parts[1:])  # snake_case to camelCase
    return rng.choice(words) if words else name + "_"


def _parser() -> Any:
    import tree_sitter as ts
    import tree_sitter_python as tsp

    return ts.Parser(ts.Language(tsp.language()))


def _walk(node: Any) -> Iterator[Any]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _sites(lines: list[str], edits: dict[int, str], rng: random.Random, source: str) -> EditCase | None:
    """An edit case from per-row rewrites (row -> new row) at three or more rows: the first one or two, in
    row order, applied as the history; the next one the target."""
    rows = sorted(r for r, new in edits.items() if new != lines[r])
    if len(rows) < 2:
        return None
    shown = rng.randint(1, min(2, len(rows) - 1))
    doc = list(lines)
    changes = []
    for r in rows[:shown]:
        changes.append(((lines[r],), (edits[r],)))
        doc[r] = edits[r]
    target = rows[shown]
    return EditCase("\n".join(doc), tuple(changes), target, edits[target], source)


def _replace_spans(line: str, spans: list[tuple[int, int]], text: str) -> str:
    """``line`` (bytes offsets in its UTF-8 form) with each span replaced by ``text``."""
    data = line.encode("utf-8")
    for a, b in sorted(spans, reverse=True):
        data = data[:a] + text.encode("utf-8") + data[b:]
    return data.decode("utf-8")


@dataclass
class _Parts:
    """What the synthetic edits use of a file's tree: identifiers per function, one-row calls per callee,
    function definitions by name, and the file's words."""

    idents: dict[tuple[int, str], list[tuple[int, int, int]]]  # (function, name) -> (row, col0, col1)
    calls: dict[str, list[Any]]  # callee text -> one-row call nodes
    defs: dict[str, Any]  # function name -> definition node
    words: list[str]


def _parts(root: Any) -> _Parts:
    idents: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
    calls: dict[str, list[Any]] = {}
    defs: dict[str, Any] = {}
    words: set[str] = set()
    for n in _walk(root):
        if n.type == "function_definition":
            name = n.child_by_field_name("name")
            if name is not None:
                defs[name.text.decode()] = n
                for m in _walk(n):
                    if m.type == "identifier" and m.start_point[0] == m.end_point[0]:
                        w = m.text.decode()
                        words.add(w)
                        idents.setdefault((n.start_byte, w), []).append(
                            (m.start_point[0], m.start_point[1], m.end_point[1]))
        elif n.type == "call" and n.start_point[0] == n.end_point[0]:
            fn = n.child_by_field_name("function")
            if fn is not None:
                calls.setdefault(fn.text.decode(), []).append(n)
    return _Parts(idents, calls, defs, sorted(w for w in words if len(w) > 3))


def _append_arg(lines: list[str], args: Any, text: str) -> tuple[int, str]:
    """The row of an argument or parameter list with ``text`` added as its last item."""
    r, close = args.end_point[0], args.end_point[1] - 1
    sep = ", " if args.named_child_count else ""
    return r, _replace_spans(lines[r], [(close, close)], sep + text)


def _rename_case(pt: _Parts, lines: list[str], rng: random.Random) -> EditCase | None:
    names = sorted(k for k, v in pt.idents.items() if len(k[1]) > 2 and k[1] not in _KEYWORDS
                   and len({r for r, _, _ in v}) >= 3)
    if not names:
        return None
    key = rng.choice(names)
    new = _new_name(rng, key[1], pt.words)
    by_row: dict[int, list[tuple[int, int]]] = {}
    for r, a, b in pt.idents[key]:
        by_row.setdefault(r, []).append((a, b))
    return _sites(lines, {r: _replace_spans(lines[r], s, new) for r, s in by_row.items()}, rng, "rename")


def _call_case(pt: _Parts, lines: list[str], rng: random.Random) -> EditCase | None:
    callees = sorted(k for k, v in pt.calls.items() if len({c.start_point[0] for c in v}) >= 3)
    if not callees:
        return None
    callee = rng.choice(callees)
    edits: dict[int, str] = {}
    if rng.random() < 0.5:  # the same keyword argument added at each call
        kw = f"{rng.choice(_KW_NAMES)}={rng.choice(_KW_VALUES)}"
        for c in pt.calls[callee]:
            args = c.child_by_field_name("arguments")
            if args is not None and args.type == "argument_list":
                r, row = _append_arg(lines, args, kw)
                edits.setdefault(r, row)
    else:  # the callee renamed
        head, _, last = callee.rpartition(".")
        fn_new = (head + "." if head else "") + _new_name(rng, last, pt.words)
        by_row: dict[int, list[tuple[int, int]]] = {}
        for c in pt.calls[callee]:
            fn = c.child_by_field_name("function")
            by_row.setdefault(fn.start_point[0], []).append((fn.start_point[1], fn.end_point[1]))
        edits = {r: _replace_spans(lines[r], s, fn_new) for r, s in by_row.items()}
    return _sites(lines, edits, rng, "call")


def _signature_case(pt: _Parts, lines: list[str], rng: random.Random) -> EditCase | None:
    called = sorted(k for k in pt.defs if k in pt.calls)
    if not called:
        return None
    name = rng.choice(called)
    params = pt.defs[name].child_by_field_name("parameters")
    if params is None or params.start_point[0] != params.end_point[0]:
        return None
    p = rng.choice(_KW_NAMES)
    r0, row0 = _append_arg(lines, params, f"{p}=None")
    edits = {r0: row0}
    for c in pt.calls[name]:
        args = c.child_by_field_name("arguments")
        if args is None or args.type != "argument_list" or args.end_point[0] in edits:
            continue
        r, row = _append_arg(lines, args, f"{p}={p}" if rng.random() < 0.5 else p)
        edits[r] = row
    return _sites(lines, edits, rng, "signature") if len(edits) >= 2 else None


_KINDS = {"rename": _rename_case, "call": _call_case, "signature": _signature_case}


def synthetic_cases(text: str, rng: random.Random, parser: Any, per_file: int = 3) -> list[EditCase]:
    """Up to ``per_file`` synthetic cases of one Python file (renames, calls, signatures)."""
    data = text.encode("utf-8")
    if len(data) != len(text):  # byte and character columns differ: keep to ASCII files
        return []
    pt = _parts(parser.parse(data).root_node)
    lines = text.split("\n")
    kinds = list(_KINDS)
    rng.shuffle(kinds)
    out: list[EditCase] = []
    for kind in kinds * per_file:
        if len(out) >= per_file:
            break
        case = _KINDS[kind](pt, lines, rng)
        if case is not None:
            out.append(case)
    return out


# ---------------------------------------------------------------------------------------------------- the build
def _keep(rng: random.Random, tok: TextTokenizer, case: EditCase, max_prefix: int, max_suffix: int,
          ) -> Example | None:
    """A row near the target that the case leaves alone, as it stands."""
    lines = case.document.split("\n")
    rows = [r for r in range(max(0, case.row - 10), min(len(lines), case.row + 11))
            if r != case.row and lines[r].strip()]
    return example(tok, case, max_prefix, max_suffix, keep_row=rng.choice(rows)) if rows else None


def build(tok: TextTokenizer, releases: Path | None, synthetic: int, max_prefix: int, max_suffix: int,
          seed: int = SEED, files: list[corpus.CorpusFile] | None = None) -> tuple[list[Example], dict[str, Any]]:
    """The examples (real first, then synthetic) and their counts by source."""
    rng = random.Random(seed)
    cases: list[EditCase] = []
    if releases is not None:
        cases += list(real_cases(releases / "cases.jsonl.gz"))
    n_real = len(cases)
    if synthetic:
        parser = _parser()
        pool = [f for f in (files if files is not None else corpus.list_files()) if f.split == "train"]
        weights = corpus.sampling_weights(pool)
        while len(cases) < n_real + synthetic:
            f = rng.choices(pool, weights=weights)[0]
            text = corpus.read_text(f)
            if text:
                cases += synthetic_cases(text, rng, parser)
        cases = cases[: n_real + synthetic]
    out: list[Example] = []
    for c in cases:
        ex = _keep(rng, tok, c, max_prefix, max_suffix) if rng.random() < KEEP_SHARE else \
            example(tok, c, max_prefix, max_suffix)
        if ex is not None:
            out.append(ex)
    counts: dict[str, int] = {}
    for ex in out:
        counts[ex.kind] = counts.get(ex.kind, 0) + 1
    return out, {"cases": len(cases), "real_cases": n_real, "examples": len(out), "by_kind": counts}


def save(examples: list[Example], out: Path) -> Path:
    """``out/examples.npz``: every example's prefix, hole and suffix ids, flat (uint16) with their lengths."""
    out.mkdir(parents=True, exist_ok=True)
    flat = [i for e in examples for part in (e.prefix, e.hole, e.suffix) for i in part]
    lengths = np.array([[len(e.prefix), len(e.hole), len(e.suffix)] for e in examples], dtype=np.int32)
    kinds = np.array([e.kind for e in examples])
    path = out / EXAMPLES_FILE
    np.savez_compressed(path, ids=np.array(flat, dtype=np.uint16), lengths=lengths, kinds=kinds)
    return path


def load(path: str | Path) -> list[Example]:
    """The examples of ``save`` (``path``: the folder or the ``.npz`` file)."""
    p = Path(path)
    if p.is_dir():
        p = p / EXAMPLES_FILE
    if not p.is_file():
        raise SystemExit(f"no edit examples at {p}: build them with python -m edit_engine.train.edits --out DIR")
    z = np.load(p)
    ids, lengths, kinds = z["ids"].astype(np.int64).tolist(), z["lengths"].tolist(), z["kinds"].tolist()
    out, k = [], 0
    for (a, b, c), kind in zip(lengths, kinds, strict=True):
        out.append(Example(ids[k : k + a], ids[k + a : k + a + b], ids[k + a + b : k + a + b + c], str(kind)))
        k += a + b + c
    return out


def split(examples: list[Example], val_share: float = 0.02) -> tuple[list[Example], list[Example]]:
    """(train, validation) by a hash of each example's ids (the same split in every run)."""
    train: list[Example] = []
    val: list[Example] = []
    for e in examples:
        h = int(hashlib.sha1(repr((e.prefix[-64:], e.hole)).encode()).hexdigest()[:8], 16)
        (val if h % 10_000 < val_share * 10_000 else train).append(e)
    return train, val


def main(argv: list[str] | None = None) -> int:
    from edit_engine.model.checkpoint import DEFAULT_DIR
    from edit_engine.model.tokenizer import Tokenizer

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--releases", help="a release set's folder (benchmarks/release_edits.py --set train --out DIR)")
    ap.add_argument("--synthetic", type=int, default=40_000, help="synthetic cases from the training corpus")
    ap.add_argument("--tokenizer", default=str(DEFAULT_DIR / "tokenizer.json"))
    ap.add_argument("--max-prefix", type=int, default=256)
    ap.add_argument("--max-suffix", type=int, default=96)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    tok = Tokenizer.from_file(a.tokenizer)
    t = time.perf_counter()
    files = corpus.list_files()
    exs, counts = build(tok, Path(a.releases) if a.releases else None, a.synthetic, a.max_prefix, a.max_suffix,
                        a.seed, files)
    path = save(exs, Path(a.out))
    manifest = {"command": " ".join(["python -m edit_engine.train.edits", *(argv or sys.argv[1:])]),
                "seed": a.seed, "max_prefix": a.max_prefix, "max_suffix": a.max_suffix, **counts,
                "corpus_digest": corpus.manifest_digest(files),
                "releases_manifest": json.loads((Path(a.releases) / "manifest.json").read_text())
                .get("cases_sha256") if a.releases else None,
                "examples_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "seconds": round(time.perf_counter() - t, 1)}
    (Path(a.out) / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
