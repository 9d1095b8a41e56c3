"""Next edit: the document, its editable region, the edits proposed in it and the rules that propose them, with
the helpers the rules share: matching a row against a pattern's row up to a renaming of identifiers (``unify``),
applying a renaming (``rename_words``), extending one by analogy.

A ``Rule`` is one transformation the history shows, of one kind (``propagate.KINDS``): it finds the places of a
region where it applies and what each becomes (``Rule.edits``), and says whether it holds in another document
(``Rule.carried``). Every kind is a rule (``propagate.infer`` makes them all, ``propagate.candidates`` searches
them alike): repeated statement edits and aliases (``propagate.py``), changed calls, signatures and added
parameters (``call_sites.py``), renames, tree templates anti-unified from the changed rows (``rules.py``),
replaced phrases (``phrases.py``), repeated insertions (``insertions.py``) and a formatter's layout (``layout.py``).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from edit_engine.edits.patterns import indent_of, is_identifier, nodes_in_rows, token_texts
from edit_engine.syntax import trees as syntax

STOP_WORDS = frozenset({"self", "cls", "this", "None", "True", "False", "null", "nil", "true", "false"})


@dataclass(frozen=True)
class Edit:
    """Replace ``document[start:end]`` with ``text``; ``kind``: the pattern kind (``propagate.KINDS``)."""

    start: int
    end: int
    text: str
    kind: str
    order: int = 0  # the history's recency of the pattern's source (lower: more recent)


@dataclass
class Region:
    """The document, its syntax tree and line starts, the editable region's rows ``[first, last)``, and the
    cursor (an offset): edits behind it are proposed only where the code needs them (``next_edit``), so a rule
    whose search is costly may start there."""

    doc: syntax.Document
    starts: list[int]
    first: int
    last: int
    cursor: int = 0
    _nodes: dict[frozenset[str], list[Any]] = field(default_factory=dict, init=False, repr=False, compare=False)
    # What the rules work out once per region and use for every site (where a name is bound...).
    facts: dict[tuple[str, str], Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def nodes(self, types: frozenset[str]) -> list[Any]:
        """The syntax nodes of ``types`` on the region's rows (``nodes_in_rows``), found once for every rule."""
        got = self._nodes.get(types)
        if got is None:
            got = self._nodes[types] = nodes_in_rows(self.doc, types, self.first, self.last)
        return got

    @property
    def text(self) -> str:
        return self.doc.text

    @property
    def end(self) -> int:
        """The offset where the region's rows end."""
        return self.starts[self.last] if self.last < len(self.starts) else len(self.text)

    def line(self, row: int) -> str:
        end = self.starts[row + 1] - 1 if row + 1 < len(self.starts) else len(self.text)
        return self.text[self.starts[row] : end]

    def line_end(self, row: int) -> int:
        return self.starts[row] + len(self.line(row))

    def row_of(self, offset: int) -> int:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo


class Rule(abc.ABC):
    """One transformation inferred from the history. ``kind``: its pattern kind (``propagate.KINDS``, the order
    in which overlapping edits win); ``order``: the recency of its source in the history (lower: more recent)."""

    kind: ClassVar[str] = ""
    order: int = 0

    @abc.abstractmethod
    def edits(self, r: Region) -> list[Edit]:
        """The edits the rule makes in the region: each place where it applies, rewritten."""

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        """The rule as it holds in another open document (None: it is about the changed document's own code).
        ``defined()``: the names the changed document defines for other modules (``patterns.defines``)."""
        return None


def node_text(r: Region, node: Any) -> str:
    return r.doc.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")


def node_span(r: Region, node: Any) -> tuple[int, int]:
    """Character offsets of a node."""
    return r.doc.char(node.start_byte), r.doc.char(node.end_byte)


def unify(line: str, pattern: str, mapping: dict[str, str]) -> tuple[int, int] | None:
    """Whether ``line`` has ``pattern``'s tokens up to a renaming of identifiers, consistent with ``mapping``
    (pattern word -> line word; extended in place). Returns (tokens, equal tokens), or None."""
    a, b = token_texts(line), token_texts(pattern)
    if len(a) != len(b):
        return None
    inverse = {v: k for k, v in mapping.items()}
    same = 0
    kept: set[str] = set()  # identifiers the line has where the pattern has them: no other word maps to or from them
    for x, y in zip(a, b, strict=True):
        if x == y and mapping.get(y, x) == x and inverse.get(x, y) == y:
            same += 1
            kept.add(x)
            continue
        if not (is_identifier(x) and is_identifier(y)) or mapping.get(y, x) != x or inverse.get(x, y) != y \
                or x in kept or y in kept:
            return None
        mapping[y] = x
        inverse[x] = y
    return len(a), same


def rename_words(text: str, mapping: dict[str, str]) -> str:
    if not mapping:
        return text
    rx = re.compile(r"(?<!\w)(" + "|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True))
                    + r")(?!\w)")
    return rx.sub(lambda m: mapping[m.group(1)], text)


def reindent(rows: tuple[str, ...], pattern_indent: str, site_indent: str) -> list[str]:
    out = []
    for row in rows:
        ind = indent_of(row)
        if row.strip() and ind.startswith(pattern_indent):
            row = site_indent + row[len(pattern_indent) :]
        elif row.strip() and len(ind) < len(pattern_indent):
            row = site_indent[: max(0, len(site_indent) - (len(pattern_indent) - len(ind)))] + row.lstrip()
        out.append(row)
    return out


def analogy(mapping: dict[str, str], words: set[str]) -> dict[str, str]:
    """``mapping`` extended to ``words`` by the affix the mapped names share: when every renamed name swaps
    one prefix for another (``base_frozen`` -> ``sub_frozen``, ``base_slots`` -> ``sub_slots``), or one suffix,
    a word with that prefix (suffix) swaps it too (``base_weakref_slot`` -> ``sub_weakref_slot``). A word that
    holds one renamed name whole holds the new name there (``is_ws`` -> ``is_nl`` makes ``_is_ws`` ``_is_nl``;
    ``held_at``)."""
    pairs = [(a, b) for a, b in mapping.items() if a != b]
    if not pairs:
        return mapping
    out = dict(mapping)
    for swap in (_prefix_swap(pairs), _suffix_swap(pairs)):
        if swap is None:
            continue
        (x, y), front = swap
        for w in words - set(out):
            if front and w.startswith(x) and len(w) > len(x):
                out[w] = y + w[len(x) :]
            elif not front and w.endswith(x) and len(w) > len(x):
                out[w] = w[: len(w) - len(x)] + y
    for w in words - set(out):  # a word holding a renamed name whole holds the new one
        held = [(a, b, k) for a, b in pairs if (k := held_at(w, a)) >= 0]
        if len(held) == 1:
            a, b, k = held[0]
            out[w] = w[:k] + b + w[k + len(a) :]
    return out


def held_at(word: str, name: str) -> int:
    """Where ``word`` holds ``name`` (three characters or more) whole, between underscores or its edges (-1:
    nowhere): ``_is_ws`` holds ``is_ws``; ``fspath`` does not hold ``path``, nor ``ProxyTypes`` ``Proxy``."""
    if len(name) < 3 or word == name:
        return -1
    k = word.find(name)
    while k >= 0:
        if (k == 0 or word[k - 1] == "_") and (k + len(name) == len(word) or word[k + len(name)] == "_"):
            return k
        k = word.find(name, k + 1)
    return -1


def _prefix_swap(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], bool] | None:
    swaps = set()
    for a, b in pairs:
        k = 0
        while k < min(len(a), len(b)) and a[-1 - k] == b[-1 - k]:
            k += 1
        if k < 2:
            return None
        swaps.add((a[: len(a) - k], b[: len(b) - k]))
    return (swaps.pop(), True) if len(swaps) == 1 and all(x for x, _ in swaps) else None


def _suffix_swap(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], bool] | None:
    swaps = set()
    for a, b in pairs:
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        if k < 2:
            return None
        swaps.add((a[k:], b[k:]))
    return (swaps.pop(), False) if len(swaps) == 1 and all(x for x, _ in swaps) else None
