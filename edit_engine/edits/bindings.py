"""The names a document binds anywhere, for next edit's question: is a name the history renamed still defined?

``bound(doc)``: for Python, read from its syntax tree (``ast``, every scope): definitions and classes,
parameters, assigned names (``for``, ``with ... as``, ``except ... as``, ``global`` too), imported names,
attributes assigned (``self.x = ...``), and the built-ins; None when the document does not parse (nothing can be
told). For other languages, read from the text and the tree-sitter tree: declared names (``let``, ``const``,
``var``, ``func``, ``fn``, ``type`` ...), assigned names, import aliases and the parameters of every definition.
A renamed name bound nowhere any more is a reference the rename left dangling.
"""

from __future__ import annotations

import ast
import builtins
import re

from edit_engine.edits import budget
from edit_engine.edits.patterns import DEFINITIONS, nodes_in_rows, param_name, parameters
from edit_engine.syntax import trees as syntax

BUILTINS = frozenset(dir(builtins))
MAX_PYTHON_CHARS = 200_000  # a larger Python text is not read (its parse takes tens of milliseconds): None
_DECLARED = re.compile(
    r"\b(?:def|class|func|fn|function|let|var|const|struct|enum|trait|interface|type|mod|static|mut|as|import)"
    r"\s+([^\W\d]\w*)"  # a declaration, a definition, an import or its alias
    r"|([^\W\d]\w*)\s*(?::[^=\n]*)?(?::=|=(?![=>]))")  # an assignment (typed or not)


def bound(doc: syntax.Document) -> frozenset[str] | None:
    """Every name ``doc`` binds somewhere (``doc.text``), or None for Python that does not parse (or is over
    ``MAX_PYTHON_CHARS``)."""
    budget.spend(1 + len(doc.text) // 64)
    if doc.language == "python":
        return _python(doc.text) if len(doc.text) <= MAX_PYTHON_CHARS else None
    names = {next(g for g in m.groups() if g) for m in _DECLARED.finditer(doc.text)}
    for d in nodes_in_rows(doc, DEFINITIONS, 0, doc.text.count("\n") + 1):
        names.update(param_name(doc, p) for p in parameters(doc, d))
    return frozenset(names)


def _python(text: str) -> frozenset[str] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    names: set[str] = set(BUILTINS)
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            names.add(n.attr)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            names.update(n.names)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            names.add(n.name)
    return frozenset(names)
