"""Suggestions that would write a credential: never shown, whatever their source.

The memory of code, copies and the model all learn from the workspace, and a workspace holds keys (a
``settings.py`` with ``STRIPE_API_KEY = "sk-live-..."``, a ``.env``). A suggestion is refused when a string
literal it writes (wholly or partly) looks like a credential:

* it starts with a known key prefix (``sk-``, ``ghp_``, ``AKIA``, ``xoxb-``, ``-----BEGIN``, ...);
* it holds a long random-looking run (16 or more letters and digits, both mixed, at least 3.5 bits of entropy
  a character, as keys are and words, paths, URLs and identifiers are not);
* or it is assigned to a name that says it is a secret (``*_KEY``, ``*TOKEN*``, ``PASSWORD``, ``secret``,
  ``credential``, ...), as ``NAME = "..."``, ``NAME: "..."`` or ``"name": "..."``.

Linear in the text: one pass of patterns without nested repetition over the suggestion's lines.
"""

from __future__ import annotations

import math
import re
from collections import Counter

REASON = "not shown: it would write a string that looks like a credential"
PREFIXES = ("sk-", "sk_live_", "sk_test_", "rk_live_", "pk_live_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
            "github_pat_", "glpat-", "xoxa-", "xoxb-", "xoxp-", "xoxs-", "AKIA", "ASIA", "AIza", "ya29.",
            "-----BEGIN", "hf_", "npm_", "pypi-")
_LITERAL = re.compile(r"""(?:"([^"\\\n]*)"?|'([^'\\\n]*)'?)""")  # a literal, closed or cut at the line's end
_SECRET_NAME = re.compile(r"(?i)(?:api_?key|apikey|secret|token|passw(?:or)?d|passwd|credential|private_?key|"
                          r"access_?key|auth_?key|client_?secret|_key\b|\bkey\b)")
_ASSIGNED = re.compile(r"""([A-Za-z_][\w.-]*)["']?\s*(?::|=|:=|=>)\s*[rbuf]{0,2}["']$""")
MIN_RANDOM = 16  # characters: shorter runs are not judged by their look
_RUN = re.compile(rf"[A-Za-z0-9]{{{MIN_RANDOM},}}")


def entropy(s: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


def looks_random(s: str) -> bool:
    """A run of at least ``MIN_RANDOM`` letters and digits, both present, with at least 3.5 bits of entropy a
    character: a key's body (paths, URLs, words and identifiers break into shorter runs or repeat letters)."""
    return any(any(c.isdigit() for c in run) and any(c.isalpha() for c in run) and entropy(run) >= 3.5
               for run in _RUN.findall(s))


def writes_credential(line_before: str, text: str) -> bool:
    """Whether inserting ``text`` after ``line_before`` (the cursor's line up to the cursor) writes a string
    literal, closed or not, that looks like a credential (module docstring)."""
    if not any(q in text for q in "\"'"):
        return False
    start = len(line_before)  # where the inserted text begins on the first line; later lines are all inserted
    for line in (line_before + text).split("\n"):
        for m in _LITERAL.finditer(line):
            if m.end() <= start:  # wholly before the cursor: the user's own text
                continue
            body = m.group(1) if m.group(1) is not None else m.group(2) or ""
            if body.startswith(PREFIXES) or looks_random(body):
                return True
            name = _ASSIGNED.search(line[max(0, m.start() - 120) : m.start() + 1])
            if body and name and _SECRET_NAME.search(name.group(1)):
                return True
        start = 0
    return False
