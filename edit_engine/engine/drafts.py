"""Drafts from the memory of code (``edit_engine.memory``) as answers to an insert request.

The memory drafts the rest of the line left to right from n-gram counts over the document, the other open
documents and a background model of real code; it is strong exactly where the small model is weak: names and
idioms that recur locally. A draft is the answer when it is likely to be accepted: its probability (the product
of its tokens' probabilities under the nested caches) is at least ``DraftPolicy.min_score``, it holds at least
``min_chars`` characters that are not blank, and the document still parses with it at the cursor. Below that,
the request goes on to the model (or, in a language the model was not trained on, to no fill).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from edit_engine.memory.draft import DraftRule
from edit_engine.syntax.lru import BoundedLRU

if TYPE_CHECKING:
    from edit_engine.memory import Draft, Memory


@dataclass(frozen=True)
class DraftPolicy:
    """When a draft is shown. ``rule``: when the draft takes its next token (``DraftRule``: thresholds for
    the first token by the cursor's place, for the later ones, and the probability a draft keeps while it
    grows); ``min_score``: the whole draft's probability needed to show it; ``min_chars``: its fewest
    characters that are not blank; ``max_tokens``: the longest draft. Chosen on the typing replay's dev split
    (docs/results.md)."""

    rule: DraftRule = field(default_factory=DraftRule)
    min_score: float = 0.0
    min_chars: int = 2
    max_tokens: int = 24

    def whole(self) -> DraftPolicy:
        """The policy for an explicit request: a draft grows while each token clears its thresholds, however
        unsure the whole becomes (``keep`` 0): asked for a fill, a person wants the line, not its sure start."""
        return dataclasses.replace(self, rule=dataclasses.replace(self.rule, keep=0.0))

    @classmethod
    def uniform(cls, min_prob: float, local_prob: float | None = None, min_score: float = 0.0) -> DraftPolicy:
        """Every token needs ``local_prob`` from the caches or ``min_prob`` from all tiers, wherever it is."""
        return cls(DraftRule.uniform(min_prob, local_prob), min_score)


DEFAULT_POLICY = DraftPolicy()


_PAIRS = {"(": ")", "[": "]", "{": "}"}


def closers(text: str) -> str:
    """The brackets that close what ``text`` opens and leaves open, innermost first (a string left open is
    closed first, a triple-quoted one by its three quotes): what makes a draft that stops inside a call
    checkable as a prefix of valid code."""
    stack: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if text.startswith(quote, i) and text[i - 1] != "\\":
                i += len(quote)
                quote = ""
                continue
        elif c in "'\"":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote)
            continue
        elif c in _PAIRS:
            stack.append(_PAIRS[c])
        elif stack and c == stack[-1]:
            stack.pop()
        i += 1
    return quote + "".join(reversed(stack))


def open_quote(text: str) -> str:
    """The quote that closes a string ``text`` leaves open ("" when none)."""
    close = closers(text)
    return close[: len(close) - len(close.lstrip("'\""))]


# id(text) -> (text, key): front ends resend the same string objects while a file is unchanged, so a keystroke
# hashes no related file it has seen. The texts are held (an id is only unique while its object lives):
# ``KEYS_MAX_BYTES`` of them (``sys.getsizeof``) at most; a text missed costs one digest (under a millisecond
# for 500 k characters).
KEYS_MAX_ENTRIES = 64
KEYS_MAX_BYTES = 16 << 20
_KEYS: BoundedLRU[int, tuple[str, str]] = BoundedLRU(KEYS_MAX_ENTRIES, KEYS_MAX_BYTES, "related keys")


def related_key(text: str) -> str:
    """The memory's key for a related file sent with a request: a digest of its text, so a file sent again
    unchanged is not counted again (an edited one is a new key; the memory forgets the oldest)."""
    seen = _KEYS.peek(id(text))
    if seen is not None and seen[0] is text:
        return seen[1]
    key = f"related:{hashlib.blake2b(text.encode('utf-8', 'surrogatepass'), digest_size=8).hexdigest()}"
    _KEYS.put(id(text), (text, key), sys.getsizeof(text) + 160)
    return key


MEMORY_ENV = "EDIT_ENGINE_MEMORY"  # off | 0 | false: engines load without the memory of code unless asked


def memory_for(asked: bool | Memory | None) -> Memory | None:
    """The memory an engine loads with: the one given, the shipped one (True), none (False); None follows
    ``EDIT_ENGINE_MEMORY`` (on unless it says off)."""
    from edit_engine.memory import Memory

    if asked is None:
        asked = os.environ.get(MEMORY_ENV, "on").strip().lower() not in ("off", "0", "false", "no")
    if asked is True:
        return Memory.load()
    return asked or None


def set_workspace(memory: Memory, files: list[tuple[str, str]], language: str) -> None:
    """Make ``files`` ((path, text)) the memory's workspace: files it held that are not among them are
    forgotten, the others (re)counted (a file whose text is unchanged costs little)."""
    keep = {path for path, _ in files}
    for path in memory.workspace_paths():
        if path not in keep:
            memory.remove_workspace(path)
    for path, text in files:
        memory.add_workspace(path, text, language)


def draft_at(memory: Memory, text: str, offset: int, language: str, uri: str | None,
             related: list[str] | tuple[str, ...] = (), policy: DraftPolicy = DEFAULT_POLICY) -> Draft | None:
    """The memory's draft at ``offset`` of ``text`` when it passes ``policy``; None otherwise. ``related``
    files (other open documents) feed the memory's open-documents tier."""
    for other in related[:8]:
        memory.observe(related_key(other), other, language)
    key = None
    if uri:  # the document without the cursor's line (a half-typed word is no evidence for itself), kept per
        # document so that moving between documents re-counts nothing; its edits re-count only changed lines
        head, rest = text[:offset], text[offset:]
        nl = rest.find("\n")
        key = f"cursor:{uri}"
        memory.observe(key, head[: head.rfind("\n") + 1] + (rest[nl + 1 :] if nl >= 0 else ""), language)
    d = memory.draft(text[:offset], text[offset:], language, key, max_tokens=policy.max_tokens, rule=policy.rule)
    if d is None or len(d.text.strip()) < policy.min_chars or d.score < policy.min_score:
        return None
    if (_repeats_next_line(text[:offset], d.text, text[offset:]) or _assigns_itself(text[:offset], d.text)
            or _redefines(text, offset, d.text)):
        return None
    return d


_HEADER = re.compile(r"^\s*(?:async\s+def|def|class|fn|func|function)\s")


def _redefines(text: str, offset: int, draft: str) -> bool:
    """Whether the line the draft makes is a definition header already in the document, word for word (the
    counts copy the last ``def`` line; a second definition of the same signature is rarely what comes next)."""
    line = text[text.rfind("\n", 0, offset) + 1 : offset] + draft
    if not _HEADER.match(line):
        return False
    rest = text[offset:]
    after = rest[rest.find("\n") + 1 :] if "\n" in rest else ""
    before = text[: text.rfind("\n", 0, offset) + 1]
    wanted = line.strip()
    return any(other.strip() == wanted for other in (before + after).split("\n"))


_SELF_ASSIGNED = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=\s*([A-Za-z_][\w.]*)\s*$")


def _assigns_itself(prefix: str, draft: str) -> bool:
    """Whether the line the draft makes assigns a name to itself (``total = total``): counts learn that a name
    follows ``=`` on lines that start with it, and such a line does nothing."""
    m = _SELF_ASSIGNED.match(prefix[prefix.rfind("\n") + 1 :] + draft)
    return m is not None and m.group(1) == m.group(2)


def _repeats_next_line(prefix: str, draft: str, suffix: str) -> bool:
    """Whether the line the draft makes starts the next code line of the suffix again: counts learn that a
    line is followed by one like it, and the copy is then right above the line it repeats."""
    line = prefix[prefix.rfind("\n") + 1 :] + draft
    after = suffix.split("\n", 1)[1] if "\n" in suffix else ""
    nxt = next((ln for ln in after.split("\n") if ln.strip()), "")
    return bool(line.strip()) and nxt.strip().startswith(line.strip())
