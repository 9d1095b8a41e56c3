"""Held-out holes: single-line (and word, block-body, function-body) cuts from code no checkpoint trained on.

The holes come from the validation split of the training corpus (``edit_engine.train.corpus``: files whose path
hash puts them in ``val``; the training run never sees them), or from every file of a root no checkpoint was
trained on (``all_files``), with a fixed seed. Each cut is a tuple ``(prefix, suffix, hole, whole prefix, whole
suffix)``: the model sees the first two (cut for speed), the third is the true text, and the parse check rebuilds
the whole file from the last two. ``benchmarks/sweep_commit.py`` measures the commit policy on them.

- ``holes``: a non-blank, non-comment line of 8-80 characters, with its newline (HumanEval single-line's cut);
- ``word_holes``: the rest of such a line from inside a word, the cursor where the user is typing;
- ``body_holes``: a line break and a block's first line, the cursor at the end of its header;
- ``function_holes``: a body line of a short standalone function with a docstring, that function alone as the
  context (HumanEval's shape).
"""

from __future__ import annotations

import ast
import random
import re
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

from edit_engine.train import corpus

Cut = tuple[str, str, str, str, str]
"""(prefix, suffix, hole, whole prefix, whole suffix)."""

__all__ = ["Cut", "NoHeldOutFiles", "body_holes", "function_holes", "held_out_files", "holes", "parses",
           "prefix_match", "word_holes"]


class NoHeldOutFiles(ValueError):
    """The roots hold no file to cut holes from (no validation file, or no file at all)."""


def held_out_files(roots: list[str] | None = None, all_files: bool = False) -> list[corpus.CorpusFile]:
    """The files holes are cut from: the validation split of ``roots`` (default: the training corpus's roots), or
    with ``all_files`` every file under them (a root no checkpoint was trained on, e.g. ``algorithm_corpus.sh DIR
    heldout``)."""
    files = corpus.list_files([Path(r) for r in roots] if roots else None)
    files = files if all_files else [f for f in files if f.split == "val"]
    if not files:
        raise NoHeldOutFiles(f"no {'files' if all_files else 'validation files'} under {roots or 'the training corpus'}")
    return files


def drawn_lines(seed: int, roots: list[str] | None, all_files: bool,
                whole: bool = False) -> Iterator[tuple[list[str], int, random.Random]]:
    """Endless (lines of a file, index of a drawn line, the generator) draws: a non-blank, non-comment line of
    8-80 characters past the fourth of a held-out file (``whole``: one that ends with its newline)."""
    files = held_out_files(roots, all_files)
    rng = random.Random(seed)
    while True:
        text = corpus.read_text(rng.choice(files))
        if not text:
            continue
        lines = text.splitlines(keepends=True)
        cands = [i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")
                 and 8 <= len(ln.strip()) <= 80 and i > 3 and (not whole or ln.endswith("\n"))]
        if cands:
            yield lines, rng.choice(cands), rng


def holes(n: int, seed: int = 0, max_prefix_chars: int = 4000, roots: list[str] | None = None,
          all_files: bool = False) -> list[Cut]:
    """n (prefix, suffix, line, whole prefix, whole suffix) cuts: a non-blank line of a validation file, with its
    newline. The model sees the first two (cut for speed; the engine keeps fewer tokens anyway); the parse check
    rebuilds the whole file from the last two."""
    out: list[Cut] = []
    for lines, i, _ in drawn_lines(seed, roots, all_files):
        if len(out) == n:
            break
        whole_pre, whole_suf = "".join(lines[:i]), "".join(lines[i + 1 :])
        out.append((whole_pre[-max_prefix_chars:], whole_suf[:2000], lines[i], whole_pre, whole_suf))
    return out


def word_holes(n: int, seed: int = 0, max_prefix_chars: int = 4000, roots: list[str] | None = None,
               all_files: bool = False) -> list[Cut]:
    """n cuts shaped like typing: a held-out line (as ``holes`` draws them) cut inside a word of at least three
    letters or digits, after its first one to all but its last; the hole is the rest of that line (without its
    newline) and the document does not hold it yet, as when the user is typing the line. The same tuple as
    ``holes``; the suffix starts with the line's newline."""
    out: list[Cut] = []
    for lines, i, rng in drawn_lines(seed, roots, all_files, whole=True):
        if len(out) == n:
            break
        line = lines[i][:-1]
        cuts = [m.start() + k for m in re.finditer(r"[^\W_]{3,}", line) for k in range(1, len(m.group()) - 1)]
        if not cuts:
            continue
        k = rng.choice(cuts)
        whole_pre, whole_suf = "".join(lines[:i]) + line[:k], "\n" + "".join(lines[i + 1 :])
        out.append((whole_pre[-max_prefix_chars:], whole_suf[:2000], line[k:], whole_pre, whole_suf))
    return out


def body_holes(n: int, seed: int = 0, max_prefix_chars: int = 4000, roots: list[str] | None = None,
               all_files: bool = False) -> list[Cut]:
    """n cuts shaped like a block body asked for: a held-out line (as ``holes`` draws them) that starts the
    block of the header line just before it; the cursor ends the header (``def f(x):|``), the hole is a line
    break and the body's first line, and the suffix starts with the line break after it. The same tuple as
    ``holes``."""
    out: list[Cut] = []
    for lines, i, _ in drawn_lines(seed, roots, all_files, whole=True):
        if len(out) == n:
            break
        head, line = lines[i - 1], lines[i]
        if not head.rstrip().endswith(":") or head.lstrip().startswith("#"):
            continue
        if len(line) - len(line.lstrip()) <= len(head) - len(head.lstrip()):
            continue
        whole_pre, whole_suf = "".join(lines[:i])[:-1], "\n" + "".join(lines[i + 1 :])
        out.append((whole_pre[-max_prefix_chars:], whole_suf[:2000], "\n" + line[:-1], whole_pre, whole_suf))
    return out


def function_holes(n: int, seed: int = 0, roots: list[str] | None = None,
                   all_files: bool = False) -> list[Cut]:
    """n cuts shaped like HumanEval single-line's, from held-out code: a standalone function of 5-25 lines with a
    docstring (a method is dedented to the top level), one body line after the docstring as the hole, and only
    that function as the context. Same tuple as ``holes`` (the function is the whole file). No cut is drawn
    twice; fewer than n come back when the files hold fewer."""
    files = held_out_files(roots, all_files)
    rng = random.Random(seed)
    out: list[Cut] = []
    seen: set[tuple[str, int, int]] = set()
    tries = 0
    while len(out) < n and tries < 200 * n:
        tries += 1
        cf = rng.choice(files)
        text = corpus.read_text(cf)
        if not text or len(text) > 300_000:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
        lines = text.splitlines(keepends=True)
        funcs = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and f.end_lineno is not None and 5 <= f.end_lineno - f.lineno + 1 <= 25
                 and ast.get_docstring(f) is not None and len(f.body) >= 2 and not f.decorator_list]
        if not funcs:
            continue
        f = rng.choice(funcs)
        src = textwrap.dedent("".join(lines[f.lineno - 1 : f.end_lineno]))
        if not parses(src):
            continue
        body_from = f.body[1].lineno - f.lineno  # the first statement after the docstring, relative
        flines = src.splitlines(keepends=True)
        cands = [i for i in range(body_from, len(flines)) if flines[i].strip()
                 and not flines[i].lstrip().startswith("#") and 4 <= len(flines[i].strip()) <= 80]
        if not cands:
            continue
        i = rng.choice(cands)
        if (str(cf.path), f.lineno, i) in seen:
            continue
        seen.add((str(cf.path), f.lineno, i))
        pre, suf = "".join(flines[:i]), "".join(flines[i + 1 :])
        line = flines[i] if flines[i].endswith("\n") else flines[i] + "\n"
        out.append((pre, suf, line, pre, suf))
    return out


def parses(text: str) -> bool:
    """Whether Python's own parser accepts ``text`` (the interpreter's grammar)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences and the like: warnings, not errors
        try:
            ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


def prefix_match(a: str, b: str) -> float:
    """How much of ``b`` (the true text) ``a`` gets right from its start, as a share of ``b``'s characters."""
    k = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        k += 1
    return k / max(1, len(b))
