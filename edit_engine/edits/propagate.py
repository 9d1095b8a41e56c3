"""Next edit, part two: the history's patterns (``patterns.py``) as rules, and where they apply in the editable region.

``infer`` turns the analysis into rules (``sites.Rule``), one per transformation, each of a kind:

- ``line`` (``LineRule``, a change): a region block of the same shape as the change's removed rows gets its
  added rows. Shape: the same tokens up to a consistent renaming of at most ``MAX_MAPPED`` identifiers
  (``sites.unify``), with at least half of the tokens equal and one word in common besides keywords and
  ``self``; a renaming is clean (no name it brings in occurs in the pattern) and touches only words the edit
  keeps. The added rows get the same renaming (extended by analogy: ``base_x`` -> ``sub_x`` renames ``base_y``
  -> ``sub_y``) and the block's indentation; an added row that defines a name the document already holds
  (``m = expr`` before its first use) is not made again. A block of several rows is also tried row by row (each
  row with the row that replaced it). A pure insertion of one row is repeated between rows shaped like the ones
  around it; a pure deletion removes the same rows.
- ``call``, ``argument``: changed calls, signatures and added parameters (``call_sites.py``).
- ``alias``: after an added ``name = expression`` row, in the same block, the expression becomes the name
  (``(expression)`` too, ``AliasRule``); a new variable replaces a like constant passed as a keyword argument of
  its name (``KeywordRule``); a parameter added with a default value replaces that value in its definition's
  body (``DefaultRule``).
- ``rule``: a node whose tree matches a tree template's old side is rewritten from its new side (``rules.py``).
- ``phrase``: a few tokens the history replaced alike are replaced where they stand between the same neighbours
  (``phrases.py``).
- ``insert``: rows the history inserted alike at two places or more are inserted again beside the neighbour
  those places share (``insertions.py``).
- ``rename``: the history's renaming (``RenameRule``): a renamed word (identifiers in code: attribute accesses
  for an attribute rename, ``self.x`` for a plain one too, another callee's keyword argument only for a
  parameter rename; words of three letters or more in strings and comments); a name whose definition the
  history removed leaves the lists it was an item of (``GoneRule``); a newly imported function takes over the
  calls of the one its name extends (``ImportRule``).
- ``import``: a name the history imported from a module that an older top-level import still binds from
  another leaves that import (``imports.py``).
- ``layout``: where the history laid a statement out anew exactly as black does, black's other layout changes
  (``layout.py``).

``candidates`` asks every rule for its edits in the region; a language without a grammar gets the text-level
kinds only. ``resolve`` keeps the strongest edit where two overlap (in the order of ``KINDS``, then the most
recent pattern). Rows the last diff just wrote (``fresh_rows``) are left alone. ``for_elsewhere``: the rules
that hold in another open document.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from edit_engine.edits import budget, call_sites, imports, insertions, layout, phrases, rules
from edit_engine.edits.patterns import (
    CALLS,
    DEFINITIONS,
    WORD,
    Analysis,
    Change,
    ParamAdded,
    Rename,
    defined_name,
    defines,
    indent_of,
    is_identifier,
    is_keyword_name,
    nodes_in_rows,
    param_name,
    parameters,
    tokens,
)
from edit_engine.edits.sites import (
    STOP_WORDS,
    Edit,
    Region,
    Rule,
    analogy,
    held_at,
    node_span,
    node_text,
    reindent,
    rename_words,
    unify,
)
from edit_engine.syntax import positions

REGEX_STEPS = 1_000  # budget steps of compiling a pattern's regular expression (about a third of a millisecond)
KINDS = ("line", "call", "argument", "alias", "rule", "phrase", "insert", "rename", "import", "layout")
MAX_MAPPED = 2  # identifiers a line edit may rename to fit a block (more: a different statement)
NEAR_ROWS = 3  # an insertion is not proposed where one of its rows already stands this close
MIN_SAME = 0.5  # share of a block's tokens that must be equal (not renamed) for a line edit to apply
_STRINGS = frozenset({"string", "string_content", "comment", "line_comment", "block_comment",
                      "interpreted_string_literal", "raw_string_literal", "template_string", "string_fragment"})


def infer(a: Analysis, language: str) -> list[Rule]:
    """The rules of the history, in the order of their kinds' search: a line rule per change (the most recent
    first), the call site rules, the alias rules, the renaming, the tree rules of ``language``. Inferred once
    per request and language, however many documents are searched."""
    got = a.rules.get(language)
    if got is None:
        got = a.rules[language] = _infer(a, language)
    return got


def _infer(a: Analysis, language: str) -> list[Rule]:
    recent = sorted(a.changes, key=lambda c: -c.diff)
    out: list[Rule] = [LineRule(c, 2 * order, tuple(a.pairs_of(c)) if len(c.removed) > 1 else ())
                       for order, c in enumerate(recent) if not _layout_only(c.removed, c.added)]
    out += call_sites.rules(a)
    out += [AliasRule(name, expr) for name, expr in a.aliases]
    out += [KeywordRule(name, ind, value) for name, ind, value in a.assigned]
    out += [DefaultRule(p) for p in a.params if p.default and len(tokens(p.default)) >= 2]
    out += [RenameRule(tuple(a.renames))] if a.renames else []
    out += [GoneRule(frozenset(a.gone))] if a.gone else []
    out += [ImportRule(tuple(sorted(a.imported)))] if a.imported else []
    return out + rules.infer(a, language) + phrases.infer(a) + insertions.infer(a) + imports.infer(a, language) + \
        layout.infer(a, language)


def candidates(r: Region, found: Sequence[Rule], fresh: Sequence[tuple[int, int]] = ()) -> list[Edit]:
    """Every edit the rules ``found`` make inside the region, in their order; none on the rows ``fresh``
    (``fresh_rows``)."""
    out: list[Edit] = []
    for rule in found:
        out += rule.edits(r)
    return [e for e in out if r.starts[r.first] <= e.start <= e.end <= r.end
            and r.text[e.start : e.end] != e.text and not _touches(r, e, fresh)]


def for_elsewhere(found: Sequence[Rule], document: str) -> list[Rule]:
    """The rules that hold in another open document (``Rule.carried``): changed statements, tree rules, added
    parameters, and the renames and changed calls of names the changed ``document`` defines
    (``patterns.defines``: a function renamed or given new arguments there is called elsewhere; a local variable
    or another module's function is not). Not the aliases, defaults and list items, which are about the changed
    document's own code."""
    defined = functools.cache(lambda: defines(document))
    return [c for x in found if (c := x.carried(defined)) is not None]


_IMPORT_ROW = re.compile(r"^[ \t]*(?:from\s+\S+\s+import\b|import\b|use\s+\w|#include\b|"
                         r"(?:export\s+)?(?:const|let|var)\s+\S+\s*=\s*require\()", re.M)


def _modules(r: Region) -> frozenset[str]:
    """The words of the document's import statements (the names they bind among them)."""
    if r.doc.tree is None:
        return frozenset(m.group() for x in _IMPORT_ROW.finditer(r.text)
                         for m in WORD.finditer(r.line(r.row_of(x.start()))))
    nodes = nodes_in_rows(r.doc, frozenset({"import_statement", "import_from_statement", "import_declaration",
                                            "use_declaration"}), 0, len(r.starts))
    return frozenset(m.group() for n in nodes for m in WORD.finditer(node_text(r, n)))


def _imports(r: Region, e: Edit) -> bool:
    """The edit touches an import statement (or writes one)."""
    if _IMPORT_ROW.search(e.text) or _IMPORT_ROW.search(r.text, r.starts[r.row_of(e.start)], max(e.end, e.start + 1)):
        return True
    return any("import" in n.type or n.type == "use_declaration" for n in _ancestors(r, e.start))


def fresh_rows(a: Analysis) -> list[tuple[int, int]]:
    """Document rows the last diff just wrote (its added rows): the next edit is elsewhere."""
    last = max((c.diff for c in a.changes), default=-1)
    return [(c.new_line, c.new_line + len(c.added)) for c in a.changes if c.diff == last and c.added]


def _touches(r: Region, e: Edit, rows: Sequence[tuple[int, int]]) -> bool:
    first, stop = r.row_of(e.start), r.row_of(max(e.start, e.end - 1))
    if e.start == e.end and e.start == r.starts[first]:
        return False  # an insertion before a row does not change it
    return any(first < b and stop >= a for a, b in rows)


def overlap(a: Edit, b: Edit) -> bool:
    """Two edits touch the same text (or insert at the same place, or one inserts inside the other's range)."""
    if a.start == a.end or b.start == b.end:
        return a.start == b.start or b.start < a.start < b.end or a.start < b.start < a.end
    return a.start < b.end and b.start < a.end


def resolve(edits: list[Edit]) -> list[Edit]:
    """Edits that do not overlap, the stronger kind (then the more recent pattern) winning, in document order."""
    kept: list[Edit] = []  # in document order, none touching another: only the neighbours of a place can
    starts: list[int] = []
    for e in sorted(edits, key=lambda e: (KINDS.index(e.kind), e.order, e.start)):
        budget.spend(1)
        i = bisect.bisect_left(starts, e.start)
        if not any(overlap(e, kept[j]) for j in (i - 1, i) if 0 <= j < len(kept)):
            kept.insert(i, e)
            starts.insert(i, e.start)
    return kept


# ---------------------------------------------------------------------------------------------------- line edits
def _match_block(r: Region, row: int, block: tuple[str, ...], others: tuple[str, ...],
                 max_mapped: int) -> dict[str, str] | None:
    """The renaming that makes rows ``row...`` the block, or None. A renaming must be clean: no name it
    introduces occurs in the pattern's rows (``others``: the block, then what replaces it), every renamed word
    survives the edit, as it is or inside a word the edit writes (a word the edit replaces is what the edit is
    about), and the rows share at least one word besides keywords and ``STOP_WORDS`` with the block
    (``if self.a:`` is not ``if self.b:`` renamed)."""
    mapping: dict[str, str] = {}
    total = same = 0
    for k, pat in enumerate(block):
        if row + k >= r.last:
            return None
        budget.spend(1)
        got = unify(r.line(row + k), pat, mapping)
        if got is None:
            return None
        total, same = total + got[0], same + got[1]
    if total == 0 or len(mapping) > max_mapped or same < MIN_SAME * total:
        return None
    if mapping:
        words = {t for x in others for *_, t in tokens(x)}
        kept = {t for x in others[len(block) :] for *_, t in tokens(x)}
        if any(v in words for v in mapping.values()) or (kept and not all(_kept(k, kept) for k in mapping)):
            return None  # not a clean renaming, or one of the words the edit replaces
        content = {t for x in block for *_, t in tokens(x) if is_identifier(t) and t not in STOP_WORDS}
        if not content - set(mapping):
            return None
    return mapping


def _kept(word: str, kept: set[str]) -> bool:
    """The edit keeps ``word``: as it is, or inside a word it writes (``is_nl`` in ``_is_nl``)."""
    return word in kept or any(held_at(k, word) >= 0 for k in kept)


@dataclass(frozen=True)
class LineRule(Rule):
    """A change made again where its removed block (or, for an insertion, its context rows) recurs; for a block
    of several rows, also each of its rows paired with the row that replaced it (``pairs``, weaker: the odd
    ``order`` after the block's even one). ``elsewhere``: in another document, where its import rows are left
    alone (each module imports what it uses: another's import change says nothing of this one's)."""

    kind: ClassVar[str] = "line"
    change: Change
    order: int
    pairs: tuple[tuple[str, str], ...] = ()
    elsewhere: bool = False

    def edits(self, r: Region) -> list[Edit]:
        c = self.change
        if not c.removed:
            # One inserted row (an argument, an item, a statement) is repeated; an inserted block (a definition,
            # a paragraph) is written once.
            single = len([x for x in c.added if x.strip()]) == 1
            out = _insertions(r, c, self.order) if single else []
        else:
            out = _block_edits(r, c.removed, c.added, self.order, c.before[-1:], c.after[:1])
            for o, n in self.pairs:
                if not _layout_only((o,), (n,)):
                    out += _block_edits(r, (o,), (n,), self.order + 1)
        return [e for e in out if not _imports(r, e)] if self.elsewhere else out

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        return dataclasses.replace(self, elsewhere=True)


def _layout_only(removed: tuple[str, ...], added: tuple[str, ...]) -> bool:
    """The rows changed only in blanks (indentation, spacing, line breaks): a layout fix of that place, not a
    change to make again elsewhere (re-indenting another block by it can break the code)."""
    return [t for x in removed for *_, t in tokens(x)] == [t for x in added for *_, t in tokens(x)]


def _block_edits(r: Region, removed: tuple[str, ...], added: tuple[str, ...], order: int,
                 above: tuple[str, ...] = (), below: tuple[str, ...] = ()) -> list[Edit]:
    """Region blocks shaped like ``removed`` get ``added`` (renamed to fit). ``above``/``below``: the history's
    rows around the block; a blank row the edit added next to code is left out where the site has one there."""
    out = []
    width = len(removed)
    max_mapped = MAX_MAPPED if added else 0  # a deletion: the same rows only
    for row in range(r.first, r.last - width + 1):
        mapping = _match_block(r, row, removed, removed + added, max_mapped)
        if mapping is None:
            continue
        rows = reindent(added, indent_of(removed[0]), indent_of(r.line(row)))
        fresh_words = {t for x in added for *_, t in tokens(x) if is_identifier(t)} - \
            {t for x in removed for *_, t in tokens(x)}
        mapping = analogy(mapping, fresh_words)
        new = [rename_words(x, mapping) for x in rows]
        # A row the edit added that defines a name the document now has (``m = expr`` before its first use)
        # is not made again: the repeated edit uses it.
        if len(added) > len(removed):
            fresh = {defined_name(x) for x in removed}
            kept = [x for x, y in zip(new, added, strict=True) if not _introduced(r, x, y, fresh)]
            new = kept if len(kept) >= len(removed) else new
        new = _spacing(r, new, removed, row, width, above, below)
        start, end = r.starts[row], r.starts[row + width] if row + width < len(r.starts) else len(r.text)
        text = "".join(x + "\n" for x in new)
        if end == len(r.text) and not r.text.endswith("\n"):
            text = text[:-1] if text else text
        out.append(Edit(start, end, text, "line", order))
    return out


def _spacing(r: Region, new: list[str], removed: tuple[str, ...], row: int, width: int, above: tuple[str, ...],
             below: tuple[str, ...]) -> list[str]:
    """``new`` without the blank rows the edit added at an edge where the history had code beside it and the
    site has a blank row already."""

    def blanks(rows: list[str] | tuple[str, ...]) -> int:
        return next((k for k, x in enumerate(rows) if x.strip()), len(rows))

    lead = blanks(new) - blanks(removed)
    if lead > 0 and above and above[0].strip() and row > 0 and not r.line(row - 1).strip():
        new = new[lead:]
    tail = blanks(new[::-1]) - blanks(removed[::-1])
    if tail > 0 and below and below[0].strip() and row + width < len(r.starts) and not r.line(row + width).strip():
        new = new[: len(new) - tail]
    return new


def _introduced(r: Region, row: str, pattern: str, defined: set[str | None]) -> bool:
    """Whether an added row is a whole statement defining a new name that the document holds already."""
    name = defined_name(pattern)
    body = pattern.strip()
    if name is None or name in defined or body.endswith((",", "(", "[", "{", "\\")) or not _balanced(body):
        return False
    return row.strip() == body and re.search(r"^[ \t]*" + re.escape(body) + r"[ \t]*$", r.text, re.M) is not None


def _balanced(text: str) -> bool:
    return all(text.count(a) == text.count(b) for a, b in ("()", "[]", "{}"))


def _insertions(r: Region, c: Change, order: int) -> list[Edit]:
    """A pure insertion repeated between lines shaped like the rows around the original one."""
    above = c.before[-1] if c.before else None
    below = c.after[0] if c.after else None
    anchors = [x for x in (above, below) if x is not None]
    words = sum(1 for x in anchors for t in tokens(x) if WORD.fullmatch(t[2]))
    if not anchors or words < 2 or sum(len(tokens(x)) for x in anchors) < 4:
        return []
    out = []
    for row in range(r.first, r.last + (1 if above is not None else 0)):
        budget.spend(1)
        mapping: dict[str, str] = {}
        if above is not None and (row - 1 < r.first or unify(r.line(row - 1), above, mapping) is None):
            continue
        if below is not None and (row >= r.last or unify(r.line(row), below, mapping) is None):
            continue
        if len(mapping) > 1:
            continue
        site = r.line(row - 1) if above is not None else r.line(row)
        pat = above if above is not None else below
        assert pat is not None
        new = [rename_words(x, mapping) for x in reindent(c.added, indent_of(pat), indent_of(site))]
        near = {r.line(k).strip() for k in range(max(0, row - NEAR_ROWS), min(len(r.starts), row + NEAR_ROWS))}
        if any(x.strip() and x.strip() in near for x in new):
            continue  # already there, or beside its own copy (the row just inserted, an import, a list's item)
        at = r.starts[row] if row < len(r.starts) else len(r.text)
        text = "".join(x + "\n" for x in new)
        if at == len(r.text) and not r.text.endswith("\n"):
            text = "\n" + text[:-1]
        out.append(Edit(at, at, text, "line", order))
    return out


# ---------------------------------------------------------------------------------------------------- aliases
_LOOSER = frozenset({"/", "%", "-", "@", "**", "~", "."})  # an operand beside these would change its meaning


@dataclass(frozen=True)
class AliasRule(Rule):
    """Occurrences of an aliased expression after its ``name = expression`` row, in the same block."""

    kind: ClassVar[str] = "alias"
    name: str
    expr: str

    def edits(self, r: Region) -> list[Edit]:
        out: list[Edit] = []
        budget.spend(REGEX_STEPS + r.starts[r.last - 1] // 64)
        rx = re.compile(r"^([ \t]*)" + r"(?:(?:const|let|var|mut)\s+)*" + re.escape(self.name) + r"\s*(?::=|=)\s*"
                        + re.escape(self.expr), re.M)
        for m in rx.finditer(r.text, 0, r.starts[r.last - 1]):
            out += _named(r, self.name, self.expr, r.row_of(m.start()), len(m.group(1)))
        return list(dict.fromkeys(out))


_CONSTANT = re.compile(r"""(?:[^\W\d]\w*(?:\.[^\W\d]\w*)+|-?\d[\w.]*|"[^"\n]*"|'[^'\n]*'|True|False|None)""")


@dataclass(frozen=True)
class KeywordRule(Rule):
    """A variable the history added (``name``, assigned ``value`` at indentation ``ind``) is passed where a
    keyword argument of its name held a like constant: ``dtype = torch.float16`` added,
    ``autocast(dtype=torch.bfloat16)`` -> ``autocast(dtype=dtype)``."""

    kind: ClassVar[str] = "alias"
    name: str
    ind: str
    value: str

    def edits(self, r: Region) -> list[Edit]:
        out: list[Edit] = []
        name, ind = self.name, self.ind
        budget.spend(REGEX_STEPS + len(r.text) // 64 + r.last - r.first)
        rx = re.compile(r"(?<![\w.])" + re.escape(name) + r"(\s*=\s*)(" + _CONSTANT.pattern + r")(?=\s*[,)])")
        home = re.search(r"^" + re.escape(ind) + re.escape(name) + r"\s*(?::[^=\n]*)?=(?!=)", r.text, re.M)
        if home is None:
            return out
        first = r.row_of(home.start())
        for row in range(first + 1, r.last):
            line = r.line(row)
            if ind and line.strip() and len(indent_of(line)) < len(ind):
                break  # left the block the variable was made in
            if row < r.first:
                continue
            for m in rx.finditer(line):
                if m.group(2) != name and _alike(m.group(2), self.value) and _in_call(r, r.starts[row] + m.start()):
                    out.append(Edit(r.starts[row] + m.start(2), r.starts[row] + m.end(2), name, self.kind))
        return out


def _alike(a: str, b: str) -> bool:
    """Two constants of one kind: strings, numbers, or dotted names from the same root (``torch.float16``,
    ``torch.bfloat16``)."""
    if a[:1] in "\"'" or b[:1] in "\"'":
        return a[:1] in "\"'" and b[:1] in "\"'"
    if a[:1].isdigit() or b[:1].isdigit() or a[:1] == "-" or b[:1] == "-":
        return a.lstrip("-")[:1].isdigit() and b.lstrip("-")[:1].isdigit()
    return "." in a and "." in b and a.split(".")[0] == b.split(".")[0] and a.count(".") == b.count(".")


@dataclass(frozen=True)
class DefaultRule(Rule):
    """A parameter added with a default value: in its definition's body, that value becomes the parameter
    (``dtype: torch.dtype = torch.bfloat16`` added: ``.to(dtype=torch.bfloat16)`` -> ``.to(dtype=dtype)``)."""

    kind: ClassVar[str] = "alias"
    param: ParamAdded

    def edits(self, r: Region) -> list[Edit]:
        out: list[Edit] = []
        p = self.param
        for node in nodes_in_rows(r.doc, DEFINITIONS, 0, len(r.starts)):
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name is None or body is None or node_text(r, name) != p.name or \
                    p.param not in [param_name(r.doc, x) for x in parameters(r.doc, node)]:
                continue
            out += _named(r, p.param, p.default, body.start_point[0] - 1, -1, body.end_point[0] + 1)
        return out


def _named(r: Region, name: str, expr: str, home: int, ind: int, stop: int | None = None) -> list[Edit]:
    """Edits replacing ``expr`` by ``name`` on the rows after ``home`` (up to ``stop``, or while the rows stay
    indented past ``ind``), except on rows that assign ``name``."""
    out: list[Edit] = []
    want = [t for *_, t in tokens(expr)]
    for row in range(home + 1, min(r.last, stop if stop is not None else r.last)):
        budget.spend(1)
        line = r.line(row)
        if stop is None and line.strip() and len(indent_of(line)) < ind:
            break  # left the block the alias was made in
        if row < r.first or re.match(r"\s*" + re.escape(name) + r"\s*(?::=|=(?!=))", line):
            continue
        toks = tokens(line)
        budget.spend(1 + len(toks) * len(want))
        texts = [t for *_, t in toks]
        for k in range(len(toks) - len(want) + 1):
            j = k + len(want)
            if texts[k:j] != want or (k and texts[k - 1] in _LOOSER) or (j < len(texts) and texts[j] in _LOOSER):
                continue
            if k and j < len(texts) and texts[k - 1] == "(" and texts[j] == ")" and \
                    (k == 1 or not (WORD.fullmatch(texts[k - 2]) or texts[k - 2] in ")]")):
                k, j = k - 1, j + 1  # (expression) -> name
            out.append(Edit(r.starts[row] + toks[k][0], r.starts[row] + toks[j - 1][1], name, "alias"))
    return out


# ---------------------------------------------------------------------------------------------------- renames
def _quoted(r: Region) -> list[tuple[int, int]]:
    """Character spans of the strings and comments that touch the region, sorted, the outermost only (a string's
    content lies in the string): none overlaps another, so ``_inside`` finds one by bisection."""
    if r.doc.tree is None:
        return []
    out: list[tuple[int, int]] = []
    for a, b in sorted(node_span(r, n) for n in nodes_in_rows(r.doc, _STRINGS, r.first, r.last)):
        if out and b <= out[-1][1]:
            continue
        out.append((a, b))
    return out


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """``[start, end)`` lies in one of ``spans`` (``_quoted``)."""
    k = bisect.bisect_right(spans, (start, 1 << 62)) - 1
    return k >= 0 and spans[k][0] <= start and end <= spans[k][1]


def _ancestors(r: Region, offset: int) -> Iterator[Any]:
    """The syntax nodes at the offset, innermost first (none without a tree)."""
    if r.doc.tree is None:
        return
    b = positions.byte_offset(r.text, offset)
    node = r.doc.tree.root_node.descendant_for_byte_range(b, b)
    while node is not None:
        yield node
        node = node.parent


def quoted(r: Region, offset: int) -> bool:
    """The offset lies in a string or a comment (never, without a tree)."""
    return any(n.type in _STRINGS for n in _ancestors(r, offset))


def _in_call(r: Region, offset: int) -> bool:
    """The offset lies in a call's argument list (not a definition's parameters); always, without a tree."""
    if r.doc.tree is None:
        return True
    for node in _ancestors(r, offset):
        if node.type in CALLS:
            return True
        if node.type in DEFINITIONS or node.type in ("parameters", "formal_parameters", "parameter_list"):
            return False
    return False


@dataclass(frozen=True)
class GoneRule(Rule):
    """Names whose definition the history removed leave the lists and argument lists they were items of
    (``{**a, **removed, **b}`` -> ``{**a, **b}``)."""

    kind: ClassVar[str] = "rename"
    names: frozenset[str]

    def edits(self, r: Region) -> list[Edit]:
        out: list[Edit] = []
        for row in range(r.first, r.last):
            line, base = r.line(row), r.starts[row]
            toks = tokens(line)
            budget.spend(1 + len(toks))
            texts = [t for *_, t in toks]
            for k, t in enumerate(texts):
                if t not in self.names:
                    continue
                i = k
                while i > 0 and texts[i - 1] == "*":
                    i -= 1
                before = texts[i - 1] if i else ""
                after = texts[k + 1] if k + 1 < len(texts) else ""
                if before == "," and after in (",", ")", "]", "}"):
                    out.append(Edit(base + toks[i - 1][0], base + toks[k][1], "", self.kind))
                elif before in ("(", "[", "{") and after == ",":
                    stop = toks[k + 2][0] if k + 2 < len(toks) else toks[k + 1][1]
                    out.append(Edit(base + toks[i][0], base + stop, "", self.kind))
        return out


@dataclass(frozen=True)
class ImportRule(Rule):
    """A newly imported function whose name extends a called one takes over its calls: ``_obj_setattr``
    imported, ``setattr(x, k, v)`` -> ``_obj_setattr(x, k, v)``; ``fla_cache_autotune``, ``@triton.autotune(``
    -> ``@fla_cache_autotune(``."""

    kind: ClassVar[str] = "rename"
    names: tuple[str, ...]

    def edits(self, r: Region) -> list[Edit]:
        out: list[Edit] = []
        for name in self.names:
            budget.spend(REGEX_STEPS + len(r.text) // 64 + r.last - r.first)
            parts = name.strip("_").split("_")
            tails = {"_".join(parts[k:]) for k in range(1, len(parts))}
            tails = {t for t in tails if len(t) >= 4 and t != name}
            if not tails or re.search(r"(?<![\w.])" + re.escape(name) + r"\s*\(", r.text[r.starts[r.first] :]):
                continue  # the new name is used already: what it replaces is not known
            for row in range(r.first, r.last):
                toks = tokens(r.line(row))
                budget.spend(1 + len(toks))
                texts = [t for *_, t in toks]
                for k, t in enumerate(texts):
                    if t not in tails or k + 1 >= len(texts) or texts[k + 1] != "(":
                        continue
                    j = k - 2 if k >= 2 and texts[k - 1] == "." and is_identifier(texts[k - 2]) else k
                    if j > 0 and texts[j - 1] == ".":
                        continue  # a longer chain: another object's method
                    out.append(Edit(r.starts[row] + toks[j][0], r.starts[row] + toks[k][1], name, self.kind))
        return out


@dataclass(frozen=True)
class RenameRule(Rule):
    """The history's renaming: each renamed word becomes its new name where it is that name (an attribute
    access for an attribute rename, a bare name or ``self.x`` for a plain one, either in strings and comments;
    not another callee's keyword argument, unless a parameter was renamed). ``elsewhere``: in another document,
    where a name of the changed module is also reached through the names its imports bind (``import lib``,
    Go's ``"x/lib"``: ``lib.load_config``)."""

    kind: ClassVar[str] = "rename"
    renames: tuple[Rename, ...]
    elsewhere: bool = False

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        kept = tuple(x for x in self.renames if x.new in defined())
        return RenameRule(kept, elsewhere=True) if kept else None

    def edits(self, r: Region) -> list[Edit]:
        modules = _modules(r) if self.elsewhere else frozenset()
        attr = {x.old: x.new for x in self.renames if x.attribute}
        plain = {x.old: x.new for x in self.renames if not x.attribute}
        named = {x.old for x in self.renames if x.keyword}
        quoted = _quoted(r)
        out: list[Edit] = []
        for row in range(r.first, r.last):
            line, base = r.line(row), r.starts[row]
            toks = tokens(line)
            texts = [x for *_, x in toks]
            budget.spend(1 + len(toks))
            for k, (s, e, t) in enumerate(toks):
                if t not in attr and t not in plain:
                    continue
                budget.spend(1)
                inside = _inside(quoted, base + s, base + e)
                if inside and len(t) < 3:
                    continue  # a short word in prose is not the name
                dotted = k > 0 and toks[k - 1][2] == "." and toks[k - 1][1] == s
                # In code an attribute access takes an attribute rename and a bare name a plain one; in strings
                # and comments either does. self.x mirrors a parameter x; lib.x is the changed module's x, seen
                # from another one.
                on_self = dotted and k > 1 and (toks[k - 2][2] in STOP_WORDS or toks[k - 2][2] in modules)
                new = (plain.get(t) or attr.get(t)) if inside else \
                    (attr.get(t) or (plain.get(t) if on_self else None)) if dotted else plain.get(t)
                if new is not None and not inside and t not in named and \
                        is_keyword_name(texts, k) and _in_call(r, base + s):
                    continue  # another callee's keyword argument: its parameter keeps its name
                if new is not None:
                    out.append(Edit(base + s, base + e, new, self.kind))
        return out
