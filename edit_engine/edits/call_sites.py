"""Next edit: the rules at call sites (tree-sitter), each a ``sites.Rule`` that ``propagate.infer`` makes.

- ``CallRule`` (kind ``call``): a call to a callee whose arguments the history changed gets the same change:
  arguments inserted at the same index (a keyword argument after the same keyword; one appended at the end),
  removed (a keyword argument by its name, a positional one when the arity matches), reordered (same arity), or
  replaced where the call holds the same text. An added argument is renamed the way the call's arguments differ
  from the history's (``sites.analogy``: ``base_x`` -> ``sub_x``), must use only names in scope at the call, and
  is laid out as the history laid it out (same line, or a line of its own aligned the same way); a one-line call
  that would outgrow the document's longest code line gets one argument per line.
- ``SignatureRule`` (kind ``call``): a definition of that callee gains the parameter its calls gained (annotated
  as a parameter of that name is elsewhere).
- ``ParameterRule`` (kind ``argument``): a call to a definition that gained a parameter without a default gets
  the argument, when a name of the same spelling is in scope at the call (a parameter of the enclosing
  definition, or assigned above the call in it, or imported); a call inside such a definition that forwards its
  parameters (``k=k``) to a plain-named function or a method of ``self`` (not a library's attribute) forwards the
  new one too.

The call and signature rules hold in another open document for a callee that the changed document defines; a
parameter rule holds in any.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from edit_engine.edits import budget
from edit_engine.edits.patterns import (
    CALLS,
    DEFINITIONS,
    Analysis,
    CallChange,
    ParamAdded,
    arguments,
    callee_name,
    indent_of,
    is_identifier,
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
    node_span,
    node_text,
    rename_words,
)


def rules(a: Analysis) -> list[Rule]:
    """The call site rules of the history: a call rule per changed callee (its latest change), a signature rule
    per changed call, a parameter rule per added parameter (the calls get only a definition's latest one)."""
    latest = {c.callee: c for c in a.calls}
    added = "\n".join(x for c in a.changes for x in c.added)
    wanted = {p.name: p for p in a.params if not p.default}
    return [*(CallRule(c) for c in latest.values()), *(SignatureRule(c, added) for c in a.calls),
            *(ParameterRule(p, wanted.get(p.name) is p) for p in a.params)]


def _calls_in(r: Region) -> Iterator[tuple[str, Any]]:
    for node in r.nodes(CALLS):
        if node.start_point[0] < r.first:
            continue
        name = callee_name(r.doc, node)
        if name is not None:
            yield name, node


def _text(r: Region, node: Any) -> str:
    return r.doc.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")


def _span(r: Region, node: Any) -> tuple[int, int]:
    return r.doc.char(node.start_byte), r.doc.char(node.end_byte)


def _kw(arg: str) -> str | None:
    m = re.match(r"\s*([^\W\d]\w*)\s*[=:](?!=)", arg)
    return m.group(1) if m else None


def new_arguments(site: list[str], cc: CallChange) -> list[str] | None:
    """The call's arguments after the change ``cc`` (None when it does not carry over to this call). Arguments
    the change adds are renamed as the call's own arguments differ from the history's (``analogy``)."""
    old, new = list(cc.old), list(cc.new)
    if site == old:
        return new
    if sorted(old) == sorted(new) and len(site) == len(old) and len(set(old)) == len(old):
        return [site[old.index(x)] for x in new]  # reordered: the same permutation
    out: list[str] = []
    pos = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag == "insert":
            at = _insert_at(site, old, i1, new[j1:j2])
            if at is None:
                return None
            out, pos = out + site[pos:at] + [_analogous(x, site, old) for x in new[j1:j2]], at
        elif tag == "delete":
            gone = _deleted(site, old[i1:i2], len(site) == len(old), i1)
            if gone is None or gone < pos:
                return None
            out, pos = out + site[pos:gone], gone + 1
        else:  # replace: only where the call holds the same text
            if site[i1:i2] != old[i1:i2] or i1 < pos:
                return None
            out, pos = out + site[pos:i1] + new[j1:j2], i2
    out += site[pos:]
    return out if out != site else None


def _analogous(arg: str, site: list[str], old: list[str]) -> str:
    """``arg`` (added by the history's call) renamed as the site's arguments differ from the history's: the
    identifiers of arguments with the same keyword (or, at equal arity, the same position) pair up."""
    mapping: dict[str, str] = {}
    by_kw = {_kw(x): x for x in site if _kw(x)}
    for k, x in enumerate(old):
        y = by_kw.get(_kw(x)) if _kw(x) else (site[k] if len(site) == len(old) else None)
        if y is None:
            continue
        a, b = [t for *_, t in tokens(x)], [t for *_, t in tokens(y)]
        if len(a) == len(b):
            for u, v in zip(a, b, strict=True):
                if u != v and is_identifier(u) and is_identifier(v):
                    mapping.setdefault(u, v)
    words = {t for *_, t in tokens(arg) if is_identifier(t)}
    kw = _kw(arg)
    return rename_words(arg, analogy(mapping, words - {kw} if kw else words)) if mapping else arg


def _insert_at(site: list[str], old: list[str], i: int, added: list[str]) -> int | None:
    kws = [_kw(x) for x in added]
    if all(kws):
        if any(_kw(x) in kws for x in site):
            return None  # the keyword is there already
        if i >= len(old):  # appended: at the end, before a ``**kwargs``
            return len(site) - (1 if site and site[-1].lstrip().startswith("**") else 0)
        if i > 0 and _kw(old[i - 1]):
            prev = [k for k, x in enumerate(site) if _kw(x) == _kw(old[i - 1])]
            return prev[0] + 1 if prev else len(site)
        return min(i, len(site))
    if any(kws) or i > len(site):
        return None
    positional = len([x for x in site if not _kw(x)])
    return i if i <= positional else None


def _deleted(site: list[str], gone: list[str], same_arity: bool, i: int) -> int | None:
    if len(gone) != 1:
        return None
    k = _kw(gone[0])
    if k:
        hits = [j for j, x in enumerate(site) if _kw(x) == k]
        return hits[0] if hits else None
    return i if same_arity and i < len(site) else None


@dataclass(frozen=True)
class CallRule(Rule):
    """Calls to ``change.callee`` get its change of arguments."""

    kind: ClassVar[str] = "call"
    change: CallChange

    def edits(self, r: Region) -> list[Edit]:
        out: list[Edit] = []
        cc = self.change
        for name, node in _calls_in(r) if r.doc.tree is not None else ():
            if name != cc.callee:
                continue
            args = arguments(r.doc, node)
            texts = [node_text(r, x) for x in args]
            new = new_arguments(texts, cc)
            if new is not None and _names_in_scope(r, node, [x for x in new if x not in texts]):
                e = _rewrite_args(r, node, args, new, self.kind, fresh=_laid_out(r, node, args, cc))
                if e is not None:
                    out.append(e)
        return out

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        return self if self.change.callee.split(".")[-1] in defined() else None


@dataclass(frozen=True)
class SignatureRule(Rule):
    """A callee whose calls gained one positional argument (a plain name) gains the parameter: at the same index
    (after ``self``), annotated as a parameter of that name is elsewhere in the history (``added``: the rows it
    added) or the document."""

    kind: ClassVar[str] = "call"
    change: CallChange
    added: str

    def edits(self, r: Region) -> list[Edit]:
        cc = self.change
        extra = [x for x in cc.new if x not in cc.old]
        if r.doc.tree is None or len(extra) != 1 or len(cc.new) != len(cc.old) + 1 or not is_identifier(extra[0]) \
                or [x for x in cc.new if x != extra[0]] != list(cc.old):
            return []
        out: list[Edit] = []
        name, at = extra[0], cc.new.index(extra[0])
        for d in r.nodes(DEFINITIONS):
            n = d.child_by_field_name("name")
            if n is None or node_text(r, n) != cc.callee:
                continue
            ps = parameters(r.doc, d)
            names = [param_name(r.doc, x) for x in ps]
            shift = 1 if names and names[0] in STOP_WORDS else 0
            if name in names or len(names) - shift != len(cc.old):
                continue
            budget.spend(1 + (len(self.added) + len(r.text)) // 64)
            m = re.search(r"[(,]\s*(" + re.escape(name) + r"\s*:\s*[^,)=\n]+?)\s*[,)=]", self.added + "\n" + r.text)
            texts = [node_text(r, x) for x in ps]
            e = _rewrite_args(r, d, ps, texts[: at + shift] + [m.group(1) if m else name] + texts[at + shift :],
                              self.kind, "parameters")
            if e is not None:
                out.append(e)
        return out

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        return self if self.change.callee.split(".")[-1] in defined() else None


def _laid_out(r: Region, call: Any, args: list[Any], cc: CallChange) -> dict[str, str]:
    """Separators before the arguments ``cc`` adds, laid out as the history's call laid them out."""
    out: dict[str, str] = {}
    if not args:
        return out
    row0 = call.start_point[0]
    indent = len(indent_of(r.line(row0)))
    first = node_span(r, args[0])[0]
    first_col = first - r.starts[r.row_of(first)]
    for k, x in enumerate(cc.new):
        br = cc.breaks[k] if k < len(cc.breaks) else None
        if x not in cc.old and br is not None:
            out[x] = ",\n" + " " * (first_col if br[0] else indent + br[1])
    return out


def _rewrite_args(r: Region, call: Any, args: list[Any], new: list[str], kind: str,
                  field: str = "arguments", fresh: dict[str, str] | None = None) -> Edit | None:
    """The edit that makes a call's argument list (or a definition's parameter list, ``field="parameters"``)
    ``new``. The separator between two arguments that stay neighbours is kept; a new neighbour gets the list's
    usual separator (on a list with one item per line, a line of its own), or for a new argument the one
    ``fresh`` gives it."""
    lst = call.child_by_field_name(field)
    if lst is None:
        return None
    a, b = node_span(r, lst)
    if not args:
        return Edit(a + 1, b - 1, ", ".join(new), kind)
    spans = [node_span(r, x) for x in args]
    texts = [r.text[x:y] for x, y in spans]
    seps = [r.text[spans[k][1] : spans[k + 1][0]] for k in range(len(args) - 1)]
    lead, tail = r.text[a + 1 : spans[0][0]], r.text[spans[-1][1] : b - 1]
    if seps:
        usual = max(set(seps), key=seps.count)
    elif "\n" in lead:
        usual = ",\n" + indent_of(r.line(r.row_of(spans[0][0])))
    else:
        usual = ", "
    origin, used = [], set()
    for x in new:  # each new item's original index (-1: new)
        k = next((k for k, t in enumerate(texts) if t == x and k not in used), -1)
        used.add(k)
        origin.append(k)
    pieces = [lead]
    for k, x in enumerate(new):
        pieces.append(x)
        if k < len(new) - 1:
            i, j = origin[k], origin[k + 1]
            pieces.append(seps[i] if i >= 0 and j == i + 1 else (fresh or {}).get(new[k + 1], usual))
    pieces.append(tail)
    text = "".join(pieces)
    if "\n" not in r.text[a:b] and "\n" not in text:
        row = r.row_of(a)
        if len(r.line(row)) + len(text) - (b - a - 2) > _line_limit(r):
            ind = indent_of(r.line(row))
            text = "".join(f"\n{ind}    {x}," for x in new) + f"\n{ind}"  # one per line, as black lays it out
    return Edit(a + 1, b - 1, text, kind)


def _line_limit(r: Region) -> int:
    """The document's longest line of plain code (no string, no comment), at least 79: how long it lets a line
    grow before a formatter wraps it (worked out once per region)."""
    got = r.facts.get(("line limit", ""))
    if got is None:
        budget.spend(1 + len(r.text) // 32)
        lines = r.text.split("\n")
        got = r.facts[("line limit", "")] = max([79] + [len(x) for x in lines if not any(q in x for q in "\"'#")])
    return int(got)


_MEMBER = frozenset({"attribute", "member_expression", "field_expression", "selector_expression"})


@dataclass(frozen=True)
class ParameterRule(Rule):
    """Definition ``param.name`` gained ``param.param``. ``at_calls``: it is the definition's latest parameter
    without a default, which its calls get (a name of that spelling in scope at the call); calls inside the
    definition that forward its parameters (``k=k``) forward the new one too."""

    kind: ClassVar[str] = "argument"
    param: ParamAdded
    at_calls: bool

    def edits(self, r: Region) -> list[Edit]:
        if r.doc.tree is None:
            return []
        return (self._calls(r) if self.at_calls else []) + self._forwarded(r)

    def carried(self, defined: Callable[[], set[str]]) -> Rule | None:
        return self

    def _calls(self, r: Region) -> list[Edit]:
        out: list[Edit] = []
        p = self.param
        for name, node in _calls_in(r):
            if name != p.name:
                continue
            fn = node.child_by_field_name("function")
            index = p.index - (1 if p.method and fn is not None and fn.type in _MEMBER else 0)
            args = arguments(r.doc, node)
            texts = [node_text(r, x) for x in args]
            if p.param in texts or any(_kw(x) == p.param for x in texts) or not _in_scope(r, node, p.param):
                continue
            positional = len([x for x in texts if not _kw(x)])
            if index <= positional == len(texts):
                new = texts[:index] + [p.param] + texts[index:]
            elif index >= positional and any(_kw(x) for x in texts):
                new = texts + [f"{p.param}={p.param}"]
            else:
                continue
            e = _rewrite_args(r, node, args, new, self.kind)
            if e is not None:
                out.append(e)
        return out

    def _forwarded(self, r: Region) -> list[Edit]:
        out: list[Edit] = []
        p = self.param
        for d in r.nodes(DEFINITIONS):
            name = d.child_by_field_name("name")
            if name is None or node_text(r, name) != p.name:
                continue
            for call in nodes_in_rows(r.doc, CALLS, max(r.first, d.start_point[0]), min(r.last, d.end_point[0] + 1)):
                if call.start_point[0] < r.first or call.start_byte < d.start_byte or call.end_byte > d.end_byte:
                    continue
                fn = call.child_by_field_name("function")
                if fn is None or fn.type in _MEMBER and not node_text(r, fn).startswith(tuple(STOP_WORDS)):
                    continue  # a library's function or method: its parameters are not this definition's
                args = arguments(r.doc, call)
                texts = [node_text(r, x) for x in args]
                passed = [k for k in (_kw(x) for x in texts) if k and k in p.params]
                forwards = all(re.fullmatch(rf"\s*{k}\s*=\s*{k}\s*", x) for x in texts if (k := _kw(x)) in passed)
                if not passed or p.param in passed or not forwards:
                    continue
                at = len(texts) - (1 if texts and texts[-1].lstrip().startswith("**") else 0)
                e = _rewrite_args(r, call, args, texts[:at] + [f"{p.param}={p.param}"] + texts[at:], self.kind)
                if e is not None:
                    out.append(e)
        return out


def _in_scope(r: Region, call: Any, name: str) -> bool:
    """A name spelled ``name`` is defined before the call: a parameter of an enclosing definition, an identifier
    assigned (or bound by ``for``/``with``/``import``) above it inside that definition, or at the top level of
    the document (anywhere: a module's names are there when its functions run)."""
    node = call.parent
    while node is not None and node.type not in DEFINITIONS:
        node = node.parent
    at_top, first = _module_binding(r, name)
    if node is None:  # a call at the top level: bound above it anywhere
        return at_top or 0 <= first <= r.doc.char(call.start_byte)
    if at_top or any(param_name(r.doc, p) == name for p in parameters(r.doc, node)):
        return True
    key = ("binding in", f"{node.start_byte}:{name}")
    inner = r.facts.get(key)
    if inner is None:  # where the first binding of it in that definition ends, once per definition and name
        body = r.doc.data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")
        budget.spend(1 + len(body) // 32)
        m = re.search(_bound(name), body)
        inner = r.facts[key] = m.end() if m is not None else -1
    return bool(0 <= inner <= r.doc.char(call.start_byte) - r.doc.char(node.start_byte))


def _bound(name: str) -> str:
    word = re.escape(name)
    return r"(?<![\w.])" + word + r"\s*(?::[^=\n]*)?(?::=|=(?!=)|\bin\b)|\bas\s+" + word + r"\b"


def _module_binding(r: Region, name: str) -> tuple[bool, int]:
    """Whether the document binds ``name`` at its top level (an assignment, a definition, an import), and where
    the first binding of it anywhere ends (-1: none); worked out once per region and name, for all its calls."""
    key = ("binding", name)
    got = r.facts.get(key)
    if got is None:
        word = re.escape(name)
        top = (r"^(?:" + word + r"\s*(?::[^=\n]*)?=(?!=)|(?:async\s+)?def\s+" + word + r"\b|class\s+" + word
               + r"\b)")
        budget.spend(3 + 3 * len(r.text) // 32)
        first = re.search(_bound(name), r.text)
        got = r.facts[key] = (re.search(top, r.text, re.M) is not None
                              or re.search(r"\bimport\b[^\n]*\b" + word + r"\b", r.text) is not None,
                              first.end() if first is not None else -1)
    return got


def _names_in_scope(r: Region, call: Any, texts: list[str]) -> bool:
    """Every plain name an added argument uses (``x``, ``k=x``; not attributes, not keywords) is in scope."""
    for t in texts:
        kw = _kw(t)
        value = t.split("=", 1)[1] if kw else t
        toks = [x for *_, x in tokens(value)]
        for k, x in enumerate(toks):
            if is_identifier(x) and (k == 0 or toks[k - 1] != ".") and x not in STOP_WORDS \
                    and not x[0].isupper() and not _in_scope(r, call, x):
                return False
    return True
