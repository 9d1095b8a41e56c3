"""Next edit, part one: what the user's recent edits did (the history's analysis).

The history is a list of unified diffs, oldest first, each against the file as the diffs before it left it (the
last one yields the document). ``parse_diff`` reads one; ``analyse`` turns them into *patterns*, each a change
that can be made again elsewhere (``Analysis``):

- **renames**: a word replaced one-for-one on a changed row (``iter`` -> ``it``) when the rows stay at least half
  the same (``RENAME_SIMILARITY``) and the old word is not used that way on the new rows any more; an attribute
  (``self.x`` -> ``self.y``) is kept apart from a plain name, a parameter or keyword name is marked. Also a
  definition whose name changed (one name no longer defined where one new one is, or where several are, the one
  extending it) and an imported name that one new import replaced (over the history; in a parenthesized import
  list too, told by tree-sitter). Never a built-in or standard type name swapped for another name (``list`` ->
  ``Sequence``: that place's annotation changed, ``_renamable``), nor a name given up for ``_``;
- **line edits**: each change's removed rows and the rows that replaced them, with the context rows around them
  (``propagate`` matches them up to a renaming of a few identifiers);
- **calls**: a call whose arguments changed (added, removed, reordered, replaced; matched by callee between the
  file before and after the diff, parsed with tree-sitter), with how the new call laid its arguments out;
- **parameters**: a definition that gained a parameter (with its default value, if any);
- **aliases**: an added ``name = expression`` row (``append = row.append``); also every newly assigned name
  with its value, the names newly imported, and the names whose definition was removed and is nowhere now.

The files before each diff are rebuilt by undoing the diffs from the document backwards (``history_states``);
a diff that does not undo cleanly (a client's line numbers off, an edit made since) keeps its text-level
patterns but gives no calls or parameters. ``propagate.infer`` turns the patterns into rules and finds where they
apply in the editable region; ``next_edit.py`` picks one.
"""

from __future__ import annotations

import bisect
import builtins
import collections.abc
import difflib
import functools
import keyword
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from edit_engine.edits import budget
from edit_engine.syntax import trees as syntax

MAX_DIFFS = 32  # the most recent diffs of a history that are analysed (older ones add little and cost time)
MAX_CHANGES = 64  # the most recent changes (runs of removed/added rows) of those diffs that are analysed
# Rows a change may remove or add and still be paired row by row (renames, per-row line edits): a larger one is a
# paste or a generated block, whose pairing would cost the product of its sides.
PAIR_ROWS = 200
PAIR_REACH = 16  # added rows after the previous pair that a removed row is compared with
CONTEXT_ROWS = 32  # context rows kept on each side of a change
MAX_NAMED = 64  # the most recent aliases and assignments kept (each is searched for in the region)
# Calls and definitions are read from the files before and after each of the last ``STRUCTURE_DIFFS`` diffs (two
# tree-sitter parses each, ~1 ms per 10 k characters) of documents up to ``STRUCTURE_CHARS``; beyond, text only.
STRUCTURE_DIFFS = 8
STRUCTURE_CHARS = 300_000
MAX_DIFF_CHARS = 200_000  # one diff's size limit (ValueError above it)
RENAME_SIMILARITY = 0.5  # a line pair's token similarity (difflib ratio) below which its word swaps are no renames

# Words (identifiers, numbers as written, version strings) and single punctuation marks: what edits are compared in.
WORD = re.compile(r"[^\W\d]\w*|\d[\d_]*(?:\.\d+)*(?:[eE][-+]?\d+)?[A-Za-z]*")
_NAME = re.compile(r"[^\W\d]\w*")
TOKEN = re.compile(WORD.pattern + r"|[^\w\s]")
_IDENT = re.compile(r"[^\W\d]\w*")
_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DEFINES = re.compile(r"^\s*(?:async\s+)?(?:def|class|fn|func|function|struct|enum|trait|interface|type)\s+"
                      r"([^\W\d]\w*)|^\s*(?:(?:const|let|var|pub)\s+)*([^\W\d]\w*)\s*(?::[^=]*)?(?::=|=(?!=))")
# ``name = value``: the name and where its value starts. The value is cut in ``_alias_value``, not by the pattern:
# a lazy value followed by optional blanks, ``;`` and a comment backtracked cubically on a long run of blanks.
_ALIAS = re.compile(r"^\s*(?:(?:const|let|var|mut)\s+)*([^\W\d]\w*)\s*(?::=|=(?!=))")


def is_identifier(tok: str) -> bool:
    return bool(_IDENT.fullmatch(tok)) and not keyword.iskeyword(tok)


def tokens(line: str) -> list[tuple[int, int, str]]:
    """``(start, end, text)`` of each token of ``line`` (words and single punctuation marks)."""
    return [(m.start(), m.end(), m.group()) for m in TOKEN.finditer(line)]


def token_texts(line: str) -> tuple[str, ...]:
    """The texts of ``tokens(line)``; those of lines up to ``CACHED_LINE`` characters are kept (the last
    ``CACHED_LINES`` of them), for the lines compared again and again (a pattern's rows against every row of the
    open documents)."""
    return _cached_texts(line) if len(line) <= CACHED_LINE else tuple(TOKEN.findall(line))


CACHED_LINE, CACHED_LINES = 400, 8_192  # at most a few MB


@functools.lru_cache(maxsize=CACHED_LINES)
def _cached_texts(line: str) -> tuple[str, ...]:
    return tuple(TOKEN.findall(line))


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


# ---------------------------------------------------------------------------------------------------- diffs
@dataclass(frozen=True)
class Hunk:
    """One ``@@`` hunk: 0-based first lines on either side (for an empty side, the line it sits before) and its
    rows, each ``(" " | "-" | "+", text)``."""

    old_start: int
    new_start: int
    rows: tuple[tuple[str, str], ...]

    @property
    def old_rows(self) -> list[str]:
        return [t for k, t in self.rows if k != "+"]

    @property
    def new_rows(self) -> list[str]:
        return [t for k, t in self.rows if k != "-"]


@dataclass(frozen=True)
class Change:
    """A run of removed and added lines of one hunk, with the context rows around it in that hunk. ``old_line``
    and ``new_line``: 0-based line of its first row in the file before and after its diff."""

    diff: int  # the diff's index in the history
    old_line: int
    new_line: int
    removed: tuple[str, ...]
    added: tuple[str, ...]
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


def parse_diff(text: str) -> list[Hunk]:
    """The hunks of one unified diff (``--- a/x`` / ``+++ b/x`` headers optional, ``diff --git`` and ``index``
    lines skipped). Raises ValueError: no ``@@`` hunk, or a hunk whose rows do not add up to its header."""
    if len(text) > MAX_DIFF_CHARS:
        raise ValueError(f"diff of {len(text):,} characters exceeds the limit of {MAX_DIFF_CHARS:,}")
    lines = text.split("\n")
    hunks: list[Hunk] = []
    i = 0
    while i < len(lines):
        m = _HEADER.match(lines[i])
        if m is None:
            i += 1
            continue
        old_n = int(m.group(2)) if m.group(2) is not None else 1
        new_n = int(m.group(4)) if m.group(4) is not None else 1
        rows, i = _hunk_rows(lines, i + 1, old_n, new_n, len(hunks) + 1)
        old_start = int(m.group(1)) - (1 if old_n else 0)
        new_start = int(m.group(3)) - (1 if new_n else 0)
        hunks.append(Hunk(max(0, old_start), max(0, new_start), tuple(rows)))
    if not hunks:
        raise ValueError("not a unified diff: no '@@ -a,b +c,d @@' hunk header")
    return hunks


def _hunk_rows(lines: list[str], i: int, old_n: int, new_n: int, number: int) -> tuple[list[tuple[str, str]], int]:
    rows: list[tuple[str, str]] = []
    old = new = 0
    while old < old_n or new < new_n:
        # A blank context row may have lost its space (editors strip trailing blanks); the text's final newline
        # leaves one empty string after the last row, which is not a row.
        end = i >= len(lines) or (lines[i] == "" and i == len(lines) - 1)
        if end or lines[i][:1] not in (" ", "-", "+", "\\", ""):
            raise ValueError(f"hunk {number}: its rows end after {old} of {old_n} old and {new} of {new_n} new "
                             "lines (the header's counts)")
        row = lines[i]
        i += 1
        if row.startswith("\\"):  # "\ No newline at end of file"
            continue
        kind, body = (row[0], row[1:]) if row else (" ", "")
        rows.append((kind, body))
        old += kind != "+"
        new += kind != "-"
    return rows, i


def changes(hunks: list[Hunk], diff: int) -> list[Change]:
    """The runs of removed / added rows of a diff's hunks, with their context rows (the ``CONTEXT_ROWS`` nearest
    on each side, within the hunk)."""
    out: list[Change] = []
    for h in hunks:
        old, new = h.old_start, h.new_start
        k = 0
        rows = h.rows
        at = [i for i, (kind, _) in enumerate(rows) if kind == " "]  # the context rows' places
        while k < len(rows):
            if rows[k][0] == " ":
                old, new, k = old + 1, new + 1, k + 1
                continue
            j = k
            while j < len(rows) and rows[j][0] != " ":
                j += 1
            removed = tuple(t for kind, t in rows[k:j] if kind == "-")
            added = tuple(t for kind, t in rows[k:j] if kind == "+")
            b, e = bisect.bisect_left(at, k), bisect.bisect_left(at, j)
            before = tuple(rows[i][1] for i in at[max(0, b - CONTEXT_ROWS) : b])
            after = tuple(rows[i][1] for i in at[e : e + CONTEXT_ROWS])
            out.append(Change(diff, old, new, removed, added, before, after))
            old, new, k = old + len(removed), new + len(added), j
    return out


def history_states(document: str, diffs: list[list[Hunk]]) -> list[tuple[str, str] | None]:
    """Per diff, the file before and after it, rebuilt by undoing the diffs from ``document`` backwards (a hunk
    is looked for at its line, then nearby); None for a diff that does not undo, and for every older one."""
    lines = document.split("\n")
    out: list[tuple[str, str] | None] = [None] * len(diffs)
    for d in range(len(diffs) - 1, -1, -1):
        after = "\n".join(lines)
        undone = _undo(lines, diffs[d])
        if undone is None:
            break
        lines = undone
        out[d] = ("\n".join(lines), after)
    return out


def _undo(lines: list[str], hunks: list[Hunk]) -> list[str] | None:
    out = list(lines)
    for h in reversed(hunks):
        new, old = h.new_rows, h.old_rows
        at = _find_block(out, new, h.new_start)
        if at is None:
            return None
        out[at : at + len(new)] = old
    return out


def _find_block(lines: list[str], block: list[str], near: int, reach: int = 200) -> int | None:
    if not block:
        return min(near, len(lines))
    for d in range(reach + 1):
        budget.spend(len(block))
        for at in (near - d, near + d) if d else (near,):
            if 0 <= at <= len(lines) - len(block) and lines[at : at + len(block)] == block:
                return at
    return None


# ---------------------------------------------------------------------------------------------------- patterns
@dataclass(frozen=True)
class Rename:
    old: str
    new: str
    attribute: bool  # the word followed a "." (``self.old``): only attribute accesses are renamed
    keyword: bool = False  # the word was a parameter or a keyword argument's name (``f(old=...)``)


@dataclass(frozen=True)
class CallChange:
    """The arguments of calls to ``callee`` went from ``old`` to ``new`` (argument texts). ``breaks``: per new
    argument, how the new call laid it out: None on the line of the one before, else its column relative to
    the call's first argument (``aligned``: the same column) or to the call line's indentation."""

    callee: str
    old: tuple[str, ...]
    new: tuple[str, ...]
    breaks: tuple[tuple[bool, int] | None, ...] = ()


@dataclass(frozen=True)
class ParamAdded:
    """Definition ``name`` gained parameter ``param`` at ``index`` (``method``: its first parameter is
    ``self``/``cls``/``this``, so a call through an object passes one fewer)."""

    name: str
    param: str
    index: int
    default: str  # the default value's text ("" for none)
    method: bool
    params: tuple[str, ...] = ()  # every parameter of the definition after the change


@dataclass
class Analysis:
    """The patterns of a history (``analyse``)."""

    changes: list[Change] = field(default_factory=list)
    renames: list[Rename] = field(default_factory=list)
    calls: list[CallChange] = field(default_factory=list)
    params: list[ParamAdded] = field(default_factory=list)
    aliases: list[tuple[str, str]] = field(default_factory=list)  # (name, expression)
    gone: set[str] = field(default_factory=set)  # names whose definition the history removed, defined nowhere now
    imported: set[str] = field(default_factory=set)  # names the history newly imported
    assigned: list[tuple[str, str, str]] = field(default_factory=list)  # new assignments: name, indentation, value
    pairs: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # id(change) -> its ``line_pairs``
    rules: dict[str, Any] = field(default_factory=dict)  # language -> the rules inferred (``propagate.infer``)
    new_names: int = 0  # words the last diff wrote that stand nowhere else in the document (``_new_names``)

    def pairs_of(self, c: Change) -> list[tuple[str, str]]:
        """``line_pairs`` of a change, computed once."""
        got = self.pairs.get(id(c))
        if got is None:
            got = self.pairs[id(c)] = line_pairs(c.removed, c.added)
        return got

    @property
    def last(self) -> Change | None:
        return self.changes[-1] if self.changes else None


def analyse(history: list[str], document: str, language: str = "python") -> Analysis:
    """The patterns of ``history`` (unified diffs, oldest first; the last one yields ``document``). Raises
    ValueError for a diff that does not parse."""
    parsed = [parse_diff(d) for d in history]
    parsed = parsed[-MAX_DIFFS:]
    a = Analysis()
    for d, hunks in enumerate(parsed):
        a.changes += changes(hunks, d)
    a.changes = a.changes[-MAX_CHANGES:]
    imports: set[int] = set()  # changes inside an import statement (their rows are imported names)
    grammar = syntax.load(language)
    if grammar.has_tree and a.changes and len(document) <= STRUCTURE_CHARS:
        states = history_states(document, parsed)
        for d, st in enumerate(states):
            if st is not None and d >= len(states) - STRUCTURE_DIFFS:
                budget.spend((len(st[0]) + len(st[1])) // 64)
                ch = [c for c in a.changes if c.diff == d]
                calls, params, inside = _structure(st[0], st[1], ch, language)
                a.calls += calls
                a.params += params
                imports |= {id(c) for c in inside}
    a.renames = _renames(a, imports, language)
    a.gone = _gone(a.changes, document, {x.old for x in a.renames})
    a.aliases = _aliases(a.changes)[-MAX_NAMED:]
    listed = {id(c) for c in a.changes if id(c) in imports or in_import_list(c)}
    a.imported = {n for c in a.changes for x in c.added for n in imported_names(x, id(c) in listed)} - \
        {n for c in a.changes for x in c.removed for n in imported_names(x, id(c) in listed)}
    for c in a.changes:
        if id(c) in listed:
            continue
        budget.spend(len(c.removed) + len(c.added))
        was = {defined_name(y) for y in c.removed}
        a.assigned += [(m.group(2), m.group(1), m.group(3).strip()) for x in c.added
                       if (m := _ASSIGN.match(x)) and m.group(2) not in was]
    a.assigned = a.assigned[-MAX_NAMED:]
    a.new_names = _new_names(a.changes, document)
    return a


def _new_names(chs: list[Change], document: str) -> int:
    """The words (identifiers, and words of strings and comments) that the last diff's added rows hold and that
    stand nowhere else: not in the document's other rows, not in the rows that diff removed. Many of them say
    the user is writing new code rather than repeating a change."""
    last = [c for c in chs if c.diff == chs[-1].diff] if chs else []
    if not last:
        return 0
    budget.spend(1 + len(document) // 64)
    fresh = {r for c in last for r in range(c.new_line, c.new_line + len(c.added))}
    known = {m.group() for k, row in enumerate(document.splitlines()) if k not in fresh for m in _NAME.finditer(row)}
    known |= {m.group() for c in last for x in c.removed for m in _NAME.finditer(x)}
    return len({m.group() for c in last for x in c.added for m in _NAME.finditer(x)} - known)


def line_pairs(removed: tuple[str, ...], added: tuple[str, ...]) -> list[tuple[str, str]]:
    """Removed lines paired with the added lines that replaced them: equal-sized replaced runs line by line,
    otherwise each removed line with the most similar of the ``PAIR_REACH`` added lines after the previous pair
    (ratio >= 0.5)."""
    out: list[tuple[str, str]] = []
    if not removed or not added or len(removed) > PAIR_ROWS or len(added) > PAIR_ROWS:
        return out
    budget.spend(len(removed) * len(added))
    sm = difflib.SequenceMatcher(None, list(removed), list(added), autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "replace":
            continue
        if i2 - i1 == j2 - j1:
            out += list(zip(removed[i1:i2], added[j1:j2], strict=True))
            continue
        j = j1
        for o in removed[i1:i2]:
            best, at = 0.5, -1
            sm = difflib.SequenceMatcher(None, o.strip(), "", autojunk=False)
            for k in range(j, min(j2, j + PAIR_REACH)):
                sm.set_seq2(added[k].strip())
                budget.spend(1 + (len(o) + len(added[k])) // 16)
                if sm.real_quick_ratio() < best or sm.quick_ratio() < best:
                    continue  # an upper bound of the ratio already says no
                budget.spend(4 * (1 + (len(o) + len(added[k])) // 16))
                r = sm.ratio()
                if r >= best:
                    best, at = r, k
            if at >= 0:
                out.append((o, added[at]))
                j = at + 1
    return out


def _renames(an: Analysis, imports: set[int] | None = None, language: str = "python") -> list[Rename]:
    """Words replaced one-for-one on paired lines, renamed definitions and renamed imports (one name no longer
    imported where one new name is, over the history); a word renamed two ways is dropped, a later rename of the
    same word (same kind) wins over an earlier one."""
    chs = an.changes
    found: dict[tuple[str, bool], str | None] = {}
    keywords: set[str] = set()
    for c in chs:
        used: set[tuple[str, bool]] | None = None  # (word, as an attribute) on the change's added rows
        for o, n in an.pairs_of(c):
            a, b = tokens(o), tokens(n)
            budget.spend(len(a) + len(b))
            sm = difflib.SequenceMatcher(None, [t for *_, t in a], [t for *_, t in b], autojunk=False)
            ops = [op for op in sm.get_opcodes() if op[0] != "equal"]
            if sm.ratio() < RENAME_SIMILARITY:
                continue  # a rewritten line: its word swaps are not renames
            for tag, i1, i2, j1, j2 in ops:
                if tag != "replace" or i2 - i1 != 1 or j2 - j1 != 1:
                    continue
                old, new = a[i1][2], b[j1][2]
                attr = i1 > 0 and a[i1 - 1][2] == "." and j1 > 0 and b[j1 - 1][2] == "."
                if used is None:
                    used = {u for x in c.added for u in _words_used(x)}
                if not (WORD.fullmatch(old) and WORD.fullmatch(new)) or keyword.iskeyword(old) \
                        or keyword.iskeyword(new) or old[0].isdigit() != new[0].isdigit() or len(old) < 2 \
                        or old in SELF_NAMES or new in SELF_NAMES or (old, attr) in used:
                    continue  # not a name, or still used that way after the edit: not renamed
                if old[0].isdigit() and len(ops) > 1:
                    continue  # a number is renamed only when it is the line's one change
                if language == "python" and _module_path(o, old):
                    continue  # another module imported from: the code using the old one is not renamed
                _note(found, old, new, attr)
                if is_keyword_name([t for *_, t in a], i1):
                    keywords.add(old)
        gone = {defined_name(x) for x in c.removed} - {defined_name(x) for x in c.added} - {None}
        came = {defined_name(x) for x in c.added} - {defined_name(x) for x in c.removed} - {None}
        _note_swap(found, {str(x) for x in gone}, {str(x) for x in came})
    listed = {id(c) for c in chs if id(c) in (imports or set()) or in_import_list(c)}
    removed = {n for c in chs for x in c.removed for n in imported_names(x, id(c) in listed)}
    added = {n for c in chs for x in c.added for n in imported_names(x, id(c) in listed)}
    _note_swap(found, removed - added, added - removed)
    return [Rename(o, n, attr, o in keywords) for (o, attr), n in found.items()
            if n is not None and _renamable(o, n, language)]


# Names a program cannot rename, per language: its built-in and standard type names. One swapped for another at a
# place (``list`` -> ``Sequence``, ``object`` -> ``Any``, ``ValueError`` -> ``ParserError``) changes that
# annotation or call; the old name still means what it meant everywhere else. On the development release
# histories such swaps were the next change in 4 of 28 proposals.
_VARIABLE_LIKE = frozenset({"type", "filter", "map", "zip", "range", "enumerate", "reversed", "property",
                            "staticmethod", "classmethod", "super", "slice", "memoryview"})  # also names of variables
_PYTHON_BUILT_IN = (frozenset(n for n in dir(builtins) if isinstance(getattr(builtins, n), type)) - _VARIABLE_LIKE
                    ) | frozenset(typing.__all__) | frozenset(collections.abc.__all__)
_SCRIPT_BUILT_IN = frozenset({"string", "number", "boolean", "any", "unknown", "void", "never", "undefined",
                              "object", "Array", "Promise", "Map", "Set", "Record", "Partial", "Readonly", "Error",
                              "Object"})
_BUILT_IN = {
    "python": _PYTHON_BUILT_IN,
    "javascript": _SCRIPT_BUILT_IN,
    "typescript": _SCRIPT_BUILT_IN,
    "go": frozenset({"string", "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32",
                     "uint64", "float32", "float64", "bool", "byte", "rune", "error", "any"}),
    "rust": frozenset({"i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize",
                       "f32", "f64", "bool", "char", "str", "String", "Vec", "Option", "Result", "Box", "Rc", "Arc",
                       "HashMap", "HashSet"}),
}


def _renamable(old: str, new: str, language: str) -> bool:
    """A word swap that can be a renaming: not a built-in swapped for another name (a change of case only,
    ``List`` -> ``list``, is a systematic replacement and stays), and not a name given up for ``_`` (a loop's
    variable no longer used at that place)."""
    fixed = _BUILT_IN.get(language, frozenset())
    if (old in fixed or new in fixed) and old.lower() != new.lower():
        return False
    return new != "_"


_DEFINED = re.compile(
    r"^[ \t]*(?:(?:export|pub|async|default)\s+)*(?:def|class|fn|func|function|struct|enum|trait|interface|type)"
    r"\s+([^\W\d]\w*)"  # a definition at any depth
    r"|^(?:(?:export|pub|const|let|var)\s+)*([^\W\d]\w*)\s*(?::[^=\n]*)?=(?!=)"  # a module variable
    r"|\b(?:self|this)\.([^\W\d]\w*)\s*(?::[^=\n]*)?=(?!=)"  # an attribute
    r"|\bas\s+([^\W\d]\w*)", re.M)  # an import's alias


def defines(document: str) -> set[str]:
    """The names a document defines for other modules to use: definitions and classes at any depth, module
    variables, attributes assigned through ``self``/``this``, import aliases. Not local variables, module paths
    or names imported from elsewhere."""
    budget.spend(1 + len(document) // 256)
    return {next(g for g in m.groups() if g) for m in _DEFINED.finditer(document)}


def _gone(chs: list[Change], document: str, renamed: set[str]) -> set[str]:
    """Names a removed row defined (an assignment, a definition) that nothing defines any more and that were
    not renamed."""
    out = set()
    defined: set[str] | None = None
    for c in chs:
        added = {defined_name(x) for x in c.added}
        for row in c.removed:
            name = defined_name(row)
            if name and name not in renamed and name not in added:
                if defined is None:
                    budget.spend(len(document) // 64)
                    defined = {m.group(1) for m in _DEFINED_AT.finditer(document)}
                if name not in defined:
                    out.add(name)
    return out


# A row that defines or assigns a name at its start: ``def name(``, ``class name:``, ``name =``, ``name:``.
_DEFINED_AT = re.compile(r"^[ \t]*(?:(?:async[ \t]+)?def[ \t]+|class[ \t]+)?([^\W\d]\w*)[ \t]*(?:[:=(]|$)", re.M)


def is_keyword_name(toks: list[str], k: int) -> bool:
    """Token ``k`` names a parameter or a keyword argument: after "(" or "," (or first on a continued line),
    before "=" (not "==") or ":"."""
    before = toks[k - 1] if k else ","
    after = toks[k + 1] if k + 1 < len(toks) else ""
    return before in ("(", ",") and after in ("=", ":") and (k + 2 >= len(toks) or toks[k + 2] != "=")


def _note_swap(found: dict[tuple[str, bool], str | None], gone: set[str], came: set[str]) -> None:
    """One name gone where one came is a rename; where several came, the one that extends the gone one
    (``_EscapeSub`` -> ``_EscapeSubMethod``), when it is the only one."""
    if len(gone) != 1 or not came:
        return
    old = next(iter(gone))
    if len(came) > 1:
        came = {x for x in came if x.startswith(old) or x.endswith(old)}
    if len(came) == 1:
        _note(found, old, came.pop(), False)


_IMPORT_ROW = re.compile(r"^\s*(?:from\s+\S+\s+)?import\s")


def _module_path(row: str, word: str) -> bool:
    """``row`` is a Python import and ``word`` stands in it without being a name it binds: part of a module's
    path (``typing`` in ``from typing import Final``, ``path`` in ``import os.path``). Swapping it imports the
    same names from another module; the code that uses the old module by its own name is not renamed."""
    if not _IMPORT_ROW.match(row):
        return False
    if row.lstrip().startswith("from "):
        return word not in imported_names(row)
    binds: set[str] = set()
    for part in row.split("import", 1)[1].split(","):
        words = part.split()
        if len(words) == 3 and words[1] == "as":
            binds.add(words[2])
        elif words:
            binds.add(words[0].split(".")[0])
    return word not in binds


def in_import_list(c: Change) -> bool:
    """The change sits inside a parenthesized ``from m import (...)`` list (its context above opens one)."""
    for row in reversed(c.before):
        if ")" in row:
            return False
        if re.search(r"\bimport\s*\(", row):
            return True
    return False


_ASSIGN = re.compile(r"^([ \t]*)([^\W\d]\w*)\s*(?::[^=]*)?=(?!=)([^#]*)")
_IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?([^#]*)")
_LISTED = re.compile(r"^\s*([^\W\d]\w*(?:\s+as\s+[^\W\d]\w*)?)\s*(?:,\s*)?(?:#.*)?$")


def _uses(line: str, word: str, attribute: bool) -> bool:
    """``line`` holds ``word`` as an attribute (``.word``) or, for ``attribute=False``, as a plain name."""
    return (word, attribute) in _words_used(line)


def _words_used(line: str) -> set[tuple[str, bool]]:
    """The tokens of ``line``, each with whether it follows a ``.`` (an attribute)."""
    toks = [t for *_, t in tokens(line)]
    return {(t, k > 0 and toks[k - 1] == ".") for k, t in enumerate(toks)}


def import_source(line: str) -> str | None:
    """The module a ``from m import ...`` line imports from (``m``, ``.utils``), else None."""
    m = _IMPORT.match(line)
    return m.group(1) if m else None


def imported_names(line: str, listed: bool = False) -> list[str]:
    """Names a ``from m import ...`` line binds (``x as y`` binds ``y``); with ``listed``, a row of a
    parenthesized import list too (``    name,``). A module import binds a module, which is not renamed into a
    function."""
    m = _IMPORT.match(line) or (_LISTED.match(line) if listed else None)
    if m is None:
        return []
    out = []
    listing = m.group(2) if m.re is _IMPORT else m.group(1)
    for part in listing.rstrip(" )\\").split(","):
        words = part.split()
        if words:
            name = words[-1] if len(words) == 3 and words[1] == "as" else words[0]
            if is_identifier(name):
                out.append(name)
    return out


def _note(found: dict[tuple[str, bool], str | None], old: str, new: str, attr: bool) -> None:
    key = (old, attr)
    if key in found and found[key] not in (None, new):
        found[key] = None  # renamed two ways: ambiguous
    elif key not in found or found[key] is not None:
        found[key] = new


def defined_name(line: str) -> str | None:
    """The name a line defines (``def f``, ``class C``, ``x = ...``, ``let x``...), or None."""
    m = _DEFINES.match(line)
    if m is None:
        return None
    name = m.group(1) or m.group(2)
    return name if name and not keyword.iskeyword(name) else None


def _aliases(chs: list[Change]) -> list[tuple[str, str]]:
    """Added ``name = expression`` lines whose expression is worth a name: three tokens or more, not a bare
    literal, and not using the name (``x = x + 1`` names nothing; ``append = row.append`` does)."""
    out = []
    for c in chs:
        for row in c.added:
            m = _ALIAS.match(row)
            value = _alias_value(row[m.end():]) if m is not None else ""
            if m is None or not value:
                continue
            name, expr = m.group(1), value.rstrip(",;").strip()
            if worth_naming(expr) and not _uses(expr, name, False) and not keyword.iskeyword(name):
                out.append((name, expr))
    return out


def _alias_value(rest: str) -> str:
    """The value of a ``name = value`` row after its ``=``: from its first non-blank character up to a ``#`` or
    ``//`` comment (not at its start), less trailing blanks and one ``;``. Linear in the row."""
    v = rest.lstrip()
    cut = len(v)
    for marker in ("#", "//"):
        i = v.find(marker, 1)
        if i >= 0:
            cut = min(cut, i)
    v = v[:cut].rstrip()
    if len(v) > 1 and v.endswith(";"):
        v = v[:-1].rstrip()
    return v


def worth_naming(expr: str) -> bool:
    """An expression that a name may stand for: three tokens or more, an operator, a call, an attribute or an
    index in it (not one string, not a bracketed display opened at its start)."""
    toks = [t for *_, t in tokens(expr)]
    if len(toks) < 3 or expr[0] in "([{":
        return False
    if expr[0] in "\"'" and re.fullmatch(r"([\"']).*\1", expr) and expr.count(expr[0]) == 2:
        return False  # one string literal
    return any(not WORD.fullmatch(t) and t not in "\"'," for t in toks)


# ---------------------------------------------------------------------------------------------------- calls
CALLS = frozenset({"call", "call_expression", "method_invocation", "invocation_expression"})
DEFINITIONS = frozenset({"function_definition", "function_declaration", "method_definition", "function_item",
                         "method_declaration", "function_signature_item"})
SELF_NAMES = frozenset({"self", "cls", "this"})


def callee_name(doc: syntax.Document, node: Any) -> str | None:
    """The called name of a call node: ``f`` for ``f(...)``, ``m`` for ``obj.m(...)``."""
    fn = node.child_by_field_name("function") or node.child_by_field_name("name")
    if fn is None:
        return None
    ids = [c for c in _walk(fn) if c.type in ("identifier", "property_identifier", "field_identifier")]
    return text_of(doc, ids[-1]) if ids else None


def arguments(doc: syntax.Document, node: Any) -> list[Any]:
    """A call's argument nodes (named children of its argument list, comments left out)."""
    args = node.child_by_field_name("arguments")
    if args is None:
        return []
    return [c for c in args.named_children if c.type != "comment"]


def parameters(doc: syntax.Document, node: Any) -> list[Any]:
    params = node.child_by_field_name("parameters")
    if params is None:
        return []
    return [c for c in params.named_children if c.type != "comment"]


def param_name(doc: syntax.Document, node: Any) -> str:
    """A parameter's name: its first identifier (``x`` of ``x: int = 0``, ``*args``'s ``args``)."""
    if node.type == "identifier":
        return text_of(doc, node)
    for c in _walk(node):
        if c.type == "identifier":
            return text_of(doc, c)
    return text_of(doc, node)


def _walk(node: Any) -> list[Any]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(n.children))
    return out


def text_of(doc: syntax.Document, node: Any) -> str:
    return doc.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")


def nodes_in_rows(doc: syntax.Document, types: frozenset[str], first: int, last: int) -> list[Any]:
    """Nodes of ``types`` that start on rows ``[first, last)`` or span them, outermost first."""
    out: list[Any] = []
    if doc.tree is None:
        return out
    stack = [doc.tree.root_node]
    while stack:
        n = stack.pop()
        budget.spend(1)
        if n.end_point[0] < first or n.start_point[0] >= last:
            continue
        if n.type in types:
            out.append(n)
        stack.extend(reversed(n.children))
    return out


IMPORTS = frozenset({"import_from_statement", "import_statement", "import_declaration", "use_declaration"})


def _structure(before: str, after: str, chs: list[Change],
               language: str) -> tuple[list[CallChange], list[ParamAdded], list[Change]]:
    """Calls and definitions changed by one diff, matched by name between the file before and after it, and the
    changes that lie inside an import statement. A call counts when it was there before: one on the changed rows
    of both sides, or, for a pure insertion (deletion), one around the inserted (deleted) rows."""
    old_doc, new_doc = syntax.Document.parse(before, language), syntax.Document.parse(after, language)
    calls: list[CallChange] = []
    params: list[ParamAdded] = []
    inside: list[Change] = []
    for c in chs:
        if (c.added and nodes_in_rows(new_doc, IMPORTS, c.new_line, c.new_line + len(c.added))) or \
                (c.removed and nodes_in_rows(old_doc, IMPORTS, c.old_line, c.old_line + len(c.removed))):
            inside.append(c)
        o_rows = (c.old_line, c.old_line + len(c.removed)) if c.removed else (c.old_line - 1, c.old_line + 1)
        n_rows = (c.new_line, c.new_line + len(c.added)) if c.added else (c.new_line - 1, c.new_line + 1)
        olds = _by_name(old_doc, _around(nodes_in_rows(old_doc, CALLS, *o_rows), c.old_line, bool(c.removed)),
                        callee_name)
        news = _by_name(new_doc, _around(nodes_in_rows(new_doc, CALLS, *n_rows), c.new_line, bool(c.added)),
                        callee_name)
        for name, node in news:
            match = next((x for n2, x in olds if n2 == name), None)
            if match is None:
                continue
            oa = tuple(text_of(old_doc, x) for x in arguments(old_doc, match))
            new_args = arguments(new_doc, node)
            na = tuple(text_of(new_doc, x) for x in new_args)
            if oa != na and all(c.old != oa or c.new != na for c in calls):
                calls.append(CallChange(name, oa, na, _breaks(new_doc, node, new_args)))
        params += _params_added(old_doc, new_doc, o_rows, n_rows)
    return calls, params, inside


def _around(nodes: list[Any], row: int, changed: bool) -> list[Any]:
    """The nodes to compare on one side of a change: all of them where that side has rows; where it has none,
    only those around the spot (starting above it, ending at or below it)."""
    return nodes if changed else [n for n in nodes if n.start_point[0] < row <= n.end_point[0]]


def _breaks(doc: syntax.Document, call: Any, args: list[Any]) -> tuple[tuple[bool, int] | None, ...]:
    """How a call lays out its arguments (``CallChange.breaks``)."""
    if not args:
        return ()
    row0 = call.start_point[0]
    lines = doc.text.split("\n")
    indent = len(indent_of(lines[row0])) if row0 < len(lines) else 0
    first_col = len(doc.data[: args[0].start_byte].decode("utf-8", "surrogatepass").rsplit("\n", 1)[-1])
    out: list[tuple[bool, int] | None] = [None]
    for prev, arg in zip(args, args[1:], strict=False):
        if arg.start_point[0] == prev.end_point[0]:
            out.append(None)
            continue
        col = len(doc.data[: arg.start_byte].decode("utf-8", "surrogatepass").rsplit("\n", 1)[-1])
        out.append((True, 0) if col == first_col else (False, col - indent))
    return tuple(out)


def _by_name(doc: syntax.Document, nodes: list[Any], name_of: Any) -> list[tuple[str, Any]]:
    out = []
    for n in nodes:
        name = name_of(doc, n)
        if name is not None:
            out.append((name, n))
    return out


def _def_name(doc: syntax.Document, node: Any) -> str | None:
    n = node.child_by_field_name("name")
    return text_of(doc, n) if n is not None else None


def _params_added(old_doc: syntax.Document, new_doc: syntax.Document, o_rows: tuple[int, int],
                  n_rows: tuple[int, int]) -> list[ParamAdded]:
    out = []
    olds = dict(_by_name(old_doc, nodes_in_rows(old_doc, DEFINITIONS, *o_rows), _def_name))
    for name, node in _by_name(new_doc, nodes_in_rows(new_doc, DEFINITIONS, *n_rows), _def_name):
        was = olds.get(name)
        if was is None:
            continue
        old_names = [param_name(old_doc, p) for p in parameters(old_doc, was)]
        new_ps = parameters(new_doc, node)
        new_names = [param_name(new_doc, p) for p in new_ps]
        added = [k for k, p in enumerate(new_names) if p not in old_names]
        if len(added) != 1 or len(new_names) != len(old_names) + 1:
            continue
        k = added[0]
        value = new_ps[k].child_by_field_name("value")
        default = text_of(new_doc, value) if value is not None else ""
        out.append(ParamAdded(name, new_names[k], k, default, bool(new_names) and new_names[0] in SELF_NAMES,
                              tuple(new_names)))
    return out
