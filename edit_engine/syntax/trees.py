"""Tree-sitter grammars, per-document syntax trees, and the error check that repair uses.

``load(language)`` reads ``grammars/<language>/settings.json`` and ``spans.scm`` (package data) and imports the
grammar wheel the settings name. A language without a folder, or whose wheel is missing, gets the plain
``Grammar`` (no tree; line-based rules with the same API), never an error.

``Document`` holds one document's text and tree. ``edit(start, end, new_text)`` applies an edit and re-parses
incrementally (tree-sitter reuses every subtree the edit did not touch); ``update(text)`` does the same for a
front end that only sends whole texts (the edit is the differing middle). ``SyntaxCache`` keeps documents by uri,
at most ``MAX_DOCUMENTS`` of them and ``MAX_BYTES`` together (``document_bytes`` estimates one).

Offsets in this module's API are character offsets (as everywhere in the engine); bytes and points only meet
tree-sitter, and ``positions`` converts them.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import tree_sitter as ts

from edit_engine.syntax import positions
from edit_engine.syntax.lru import BoundedLRU

log = logging.getLogger(__name__)

CAPTURES = ("comment", "string", "brackets", "block", "unit")
# LSP language ids and common short names that differ from a grammar folder's name.
ALIASES = {"typescriptreact": "tsx", "javascriptreact": "javascript", "jsx": "javascript", "py": "python",
           "python3": "python", "js": "javascript", "ts": "typescript", "rs": "rust", "golang": "go"}


@dataclass(frozen=True)
class Grammar:
    """A language's settings and, when its grammar is installed, the tree-sitter language and span query."""

    name: str
    language: ts.Language | None = None  # None: plain text, line-based rules only
    query: ts.Query | None = None  # spans.scm
    indent: str = "    "  # indentation unit when the document shows none
    block_openers: tuple[str, ...] = (":", "{", "(", "[", "=>")  # a line ending in one opens a block
    line_comment: str | None = None
    block_comment: tuple[str, str] | None = None
    quotes: tuple[str, ...] = ("\"", "'")
    brackets: tuple[tuple[str, str], ...] = (("(", ")"), ("[", "]"), ("{", "}"))
    compile_check: str | None = None  # "python": repair also checks with the language's own parser (ast)
    # Indentation-sensitive languages: a block header ends with this (Python ":"), so a statement followed by a
    # deeper-indented line must be a header ending with it (the planner's ``header`` spans). None: no such rule.
    header_end: str | None = None
    header_keywords: tuple[str, ...] = ()  # words that start a header (a rest-of-line span gets the rule only then)
    # Names code uses without defining them (keywords, builtins, methods of the builtin types): the sampler's
    # ``novel_penalty`` spares them. Empty: the penalty is off for the language (``Engine.novelty_bias``).
    common_words: frozenset[str] = frozenset()

    @property
    def has_tree(self) -> bool:
        return self.language is not None

    def parser(self) -> ts.Parser | None:
        """A new parser (parsers are not shared between threads; making one costs microseconds)."""
        return ts.Parser(self.language) if self.language is not None else None


def _read(language: str, name: str) -> str | None:
    try:
        return (resources.files("edit_engine.syntax.grammars") / language / name).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError, NotADirectoryError, OSError):
        return None


@lru_cache(maxsize=64)
def load(language: str) -> Grammar:
    """The grammar for ``language`` (e.g. ``"python"``, or an LSP id such as ``"typescriptreact"``); the plain
    grammar when none is installed."""
    folder = ALIASES.get(language, language)
    raw = _read(folder, "settings.json") if folder.isidentifier() else None
    if raw is None:
        return Grammar(language)
    s: dict[str, Any] = json.loads(raw)
    settings: dict[str, Any] = {
        "indent": s.get("indent", "    "),
        "block_openers": tuple(s.get("block_openers", ())),
        "line_comment": s.get("line_comment"),
        "block_comment": tuple(s["block_comment"]) if s.get("block_comment") else None,
        "quotes": tuple(s.get("quotes", ())),
        "brackets": tuple((o, c) for o, c in s.get("brackets", ())),
        "compile_check": s.get("compile_check"),
        "header_end": s.get("header_end"),
        "header_keywords": tuple(s.get("header_keywords", ())),
        "common_words": frozenset(s.get("common_words", ())),
    }
    try:
        module = importlib.import_module(s["module"])
        lang = ts.Language(getattr(module, s.get("function", "language"))())
    except (ImportError, AttributeError, KeyError, ValueError):
        return Grammar(language, **settings)  # settings without a tree
    src = _spans(folder)
    query = ts.Query(lang, src) if src else None
    return Grammar(language, lang, query, **settings)


def _spans(folder: str, seen: tuple[str, ...] = ()) -> str | None:
    """A grammar's ``spans.scm``, with the queries it inherits first: a first line ``; inherits: a, b`` (the
    convention of Neovim's tree-sitter queries) prepends those folders' queries, so a dialect (TypeScript,
    TSX) adds only its own node kinds to its base language's."""
    src = _read(folder, "spans.scm")
    if src is None:
        return None
    first = src.split("\n", 1)[0]
    if not first.startswith("; inherits:"):
        return src
    parts = []
    for base in (b.strip() for b in first.removeprefix("; inherits:").split(",")):
        if base and base.isidentifier() and base not in seen:
            parts.append(_spans(base, (*seen, folder)) or "")
    return "\n".join([*parts, src])


def point(text: str, offset: int) -> tuple[int, int]:
    """Tree-sitter point (row, byte column) of a character offset. Rows count ``\\n`` as tree-sitter does."""
    ls = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset), positions.byte_offset(text[ls:offset], offset - ls)


def broken_nodes(tree: ts.Tree) -> list[ts.Node]:
    """ERROR and MISSING nodes, outermost first; only subtrees that report an error are visited."""
    out: list[ts.Node] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            out.append(node)
            continue
        if node.has_error:
            stack.extend(reversed(node.children))
    return out


CHUNK_BYTES = 4 << 10  # sources are handed to tree-sitter in chunks of this size (``_parse``)
_chunks = threading.local()  # each thread's chunk buffer (``_parse``)


def _chunk_buffer() -> bytearray:
    buf: bytearray | None = getattr(_chunks, "buf", None)
    if buf is None:
        buf = _chunks.buf = bytearray(CHUNK_BYTES)
    return buf


def _parse(g: Grammar, data: bytes, old: ts.Tree | None) -> ts.Tree | None:
    """Parse ``data`` (reusing ``old``, edited to match it); None when the grammar is missing or the parse ran
    past its deadline (``parse_deadline``). tree-sitter holds the interpreter lock while it parses, so the source
    is handed over in ``CHUNK_BYTES`` chunks and the lock is released between them, and tree-sitter's progress
    callback lets other threads run and ends a parse past its deadline: a server's event loop keeps answering
    while a 500 k-character document is parsed in a worker thread, and a grammar that loops on some text
    (tree-sitter-typescript's TSX grammar on two lines of Python does) costs a bounded time.

    Each chunk is copied into the calling thread's one buffer, returned every time: py-tree-sitter 0.26.1 keeps a
    reference to every object the read callback returns but the last, so fresh slices would stay in memory for
    good (1.5 to 2 times the source's bytes a parse, measured). tree-sitter reads a chunk only until it asks for
    the next one, so refilling the buffer is safe. The last, shorter chunk is the same buffer shrunk in place: it
    is read several times a parse, and fresh slices of it stayed in memory (four a parse, 7.7 MB in 2,000 parses
    of 5-14 k characters)."""
    parser = g.parser()
    if parser is None:
        return None
    view = memoryview(data)
    deadline = time.monotonic() + parse_deadline(len(data))

    def read(byte: int, point: tuple[int, int]) -> bytes | bytearray:
        time.sleep(0)  # releases the interpreter lock: waiting threads run
        if byte >= len(data):
            return b""  # one shared object
        buf = _chunk_buffer()
        buf[:] = view[byte : byte + CHUNK_BYTES]  # shorter at the end: the buffer shrinks in place
        return buf

    def progress(offset: int, has_error: bool) -> bool:  # True ends the parse
        return time.monotonic() > deadline

    try:
        if old is not None:
            return parser.parse(read, old, progress_callback=progress)
        return parser.parse(read, progress_callback=progress)
    except ValueError:  # ended by ``progress``
        log.warning("the %s grammar took over %.1f s on %d bytes: parse abandoned", g.name,
                    parse_deadline(len(data)), len(data))
        return None


def parse_deadline(size: int) -> float:
    """Seconds a parse of ``size`` bytes may take: ``PARSE_BASE_S`` plus ``PARSE_S_PER_MB`` per megabyte (a
    parse takes about 0.1 s per megabyte of ordinary code)."""
    return PARSE_BASE_S + PARSE_S_PER_MB * size / 1e6


PARSE_BASE_S, PARSE_S_PER_MB = 1.0, 1.0


@dataclass
class Document:
    """One document's text and syntax tree (``tree`` is None for a language without a grammar)."""

    text: str
    grammar: Grammar
    tree: ts.Tree | None = None
    _data: bytes = field(default=b"", repr=False)

    @classmethod
    def parse(cls, text: str, language: str) -> Document:
        g = load(language)
        doc = cls(text, g)
        doc._reparse(None)
        return doc

    @property
    def language(self) -> str:
        return self.grammar.name

    @property
    def data(self) -> bytes:
        return self._data

    def _reparse(self, old: ts.Tree | None) -> None:
        self._data = self.text.encode("utf-8", "surrogatepass")
        self.tree = _parse(self.grammar, self._data, old)

    def _edited_tree(self, start: int, end: int, new_text: str) -> tuple[str, ts.Tree | None]:
        """The new text and a copy of the tree with the edit applied (ready for an incremental parse)."""
        text = self.text[:start] + new_text + self.text[end:]
        if self.tree is None:
            return text, None
        tree = self.tree.copy()
        sb = positions.byte_offset(self.text, start)
        tree.edit(
            start_byte=sb,
            old_end_byte=sb + len(self.text[start:end].encode("utf-8", "surrogatepass")),
            new_end_byte=sb + len(new_text.encode("utf-8", "surrogatepass")),
            start_point=point(self.text, start),
            old_end_point=point(self.text, end),
            new_end_point=point(text, start + len(new_text)),
        )
        return text, tree

    def edit(self, start: int, end: int, new_text: str) -> None:
        """Replace ``text[start:end]`` by ``new_text`` and re-parse incrementally."""
        if not 0 <= start <= end <= len(self.text):
            raise ValueError(f"edit [{start}, {end}) outside the document (length {len(self.text)})")
        self.text, tree = self._edited_tree(start, end, new_text)
        self._reparse(tree)

    def update(self, text: str) -> None:
        """Make the document ``text``: one incremental edit over the part that differs."""
        if text == self.text:
            return
        start, old_end, new_end = positions.changed_span(self.text, text)
        self.edit(start, old_end, text[start:new_end])

    def parse_with(self, start: int, end: int, new_text: str) -> ts.Tree | None:
        """The tree of the document with ``text[start:end]`` replaced (the document itself is unchanged)."""
        text, tree = self._edited_tree(start, end, new_text)
        return _parse(self.grammar, text.encode("utf-8", "surrogatepass"), tree)

    def captures_at(self, offset: int) -> dict[str, list[ts.Node]]:
        """Query captures whose node covers the character ``offset`` (start <= offset <= end), innermost last."""
        if self.tree is None or self.grammar.query is None:
            return {}
        b = positions.byte_offset(self.text, offset)
        cursor = ts.QueryCursor(self.grammar.query)
        cursor.set_byte_range(max(0, b - 1), min(len(self._data), b + 1))
        found = cursor.captures(self.tree.root_node)
        out: dict[str, list[ts.Node]] = {}
        for name, nodes in found.items():
            inside = [n for n in nodes if n.start_byte <= b <= n.end_byte]
            inside.sort(key=lambda n: (n.start_byte, -n.end_byte))
            out[name] = inside
        return out

    def snapshot(self) -> Document:
        """A copy that later edits of this document do not change (trees are copied by reference count)."""
        return Document(self.text, self.grammar, self.tree.copy() if self.tree is not None else None, self._data)

    def char(self, byte: int) -> int:
        """Character offset of a byte offset of this document."""
        return len(self._data[:byte].decode("utf-8", "surrogatepass"))


MAX_DOCUMENTS = 64  # documents a ``SyntaxCache`` keeps
# Their estimated bytes together: some eight 500 k-character documents (the front ends' largest), or 64 of the
# few-thousand-line files an editor usually has open.
MAX_BYTES = 128 << 20
# Resident bytes of a syntax tree per visible node (``Node.descendant_count``, stored in the tree: O(1) to read).
# Measured as the RSS growth of ten parses kept alive, 240 k characters each, one process per text: stdlib
# modules repeated (_pydecimal 125, tokenize 131, json.decoder 131, unittest.case 125, ast 121, sre_parse 111,
# pickletools 181: long docstrings), dense one-line statements 114-120, comments only 91, non-ASCII 110. Per
# character the same trees took 1.4 to 120 bytes, so the node count, not the length, sizes a tree.
TREE_BYTES_PER_NODE = 160


def document_bytes(doc: Document) -> int:
    """Estimated resident bytes of a document: its text, its UTF-8 bytes and its tree."""
    nodes = doc.tree.root_node.descendant_count if doc.tree is not None else 0
    return sys.getsizeof(doc.text) + sys.getsizeof(doc.data) + TREE_BYTES_PER_NODE * nodes


class SyntaxCache:
    """Documents by uri, so each request re-parses incrementally. Least recently used ones are dropped beyond
    ``capacity`` documents or ``max_bytes`` estimated bytes (``document_bytes``); a document larger than the
    whole budget is parsed for its request and not kept."""

    def __init__(self, capacity: int = MAX_DOCUMENTS, max_bytes: int = MAX_BYTES) -> None:
        self.capacity = capacity
        self._docs: BoundedLRU[str, Document] = BoundedLRU(capacity, max_bytes, "syntax trees")
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Estimated bytes of the documents kept."""
        return self._docs.nbytes

    def get(self, uri: str, text: str, language: str) -> Document:
        """The document at ``uri``, brought up to ``text`` (incrementally when it was known)."""
        with self._lock:
            doc = self._docs.get(uri)
            if doc is None or doc.language != language:
                doc = Document.parse(text, language)
            else:
                doc.update(text)
            self._docs.put(uri, doc, document_bytes(doc))
            return doc.snapshot()

    def edit(self, uri: str, start: int, end: int, new_text: str) -> None:
        """Apply an editor's edit to a known document (a no-op for an unknown uri)."""
        with self._lock:
            doc = self._docs.peek(uri)
            if doc is not None:
                doc.edit(start, end, new_text)
                self._docs.resize(uri, document_bytes(doc))

    def close(self, uri: str) -> None:
        with self._lock:
            self._docs.pop(uri)

    def __len__(self) -> int:
        return len(self._docs)
