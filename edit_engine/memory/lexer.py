"""Lossless, linear-time code lexers for the n-gram memory.

Tokens are chosen so that counting them gives useful statistics and so that joining them gives back
the input exactly:

* ``"\\n" + indentation`` is one token, so the model learns where blocks open and close;
* one leading blank is glued to the word or operator after it (``" foo"``, ``" ="``), which halves the
  token count of ordinary code without losing spacing;
* identifiers, numbers and the language's multi-character operators are single tokens;
* short string literals without blanks (``"utf-8"``, ``'id'``) stay whole; longer ones are split into
  the quote, the words and the punctuation inside them, so their contents share statistics with code.

Every pattern is a union of alternatives whose quantifiers are either possessive in effect (a character
class followed by something it cannot match) or bounded, so the regex engine never backtracks more than a
constant amount at any position: lexing is linear in the input size even on adversarial text.
"""

from __future__ import annotations

import re
from functools import cache

__all__ = ["tokenize", "LANGUAGES", "canonical_language"]

_COMMON_OPS = [
    "**=", "//=", ">>=", "<<=", "...", "===", "!==", "&&=", "||=", "??=", "->", "=>", "::", "==", "!=",
    "<=", ">=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "**", "//", "<<", ">>", "&&", "||", "??",
    "?.", "++", "--", ":=", "..=", "..", "/*", "*/", "#[", "<-",
]

_LANG_OPS: dict[str, list[str]] = {
    "python": [o for o in _COMMON_OPS if o not in {"===", "!==", "&&=", "||=", "??=", "=>", "&&", "||",
                                                    "??", "?.", "++", "--", "..=", "..", "/*", "*/", "#[",
                                                    "<-", "::"}] + ['"""', "'''"],
    "javascript": [o for o in _COMMON_OPS if o not in {"//=", ":=", "..=", "..", "#[", "<-", "::"}]
    + [">>>", "${", "//"],
    "go": [o for o in _COMMON_OPS if o not in {"**=", "//=", "===", "!==", "&&=", "||=", "??=", "=>",
                                                "??", "?.", "**", "..=", "..", "#["}] + ["&^", "//"],
    "rust": [o for o in _COMMON_OPS if o not in {"**=", "//=", "===", "!==", "&&=", "||=", "??=", "??",
                                                  "?.", "++", "--", ":=", "**", "<-"}] + ["//", "///"],
}
_LANG_OPS["generic"] = _COMMON_OPS + ["//"]

_QUOTES = {"python": "\"'", "javascript": "\"'`", "go": "\"'`", "rust": "\"'", "generic": "\"'`"}

LANGUAGES = ("python", "javascript", "go", "rust", "generic")

_ALIASES = {
    "py": "python", "python3": "python", "js": "javascript", "jsx": "javascript",
    "javascriptreact": "javascript", "typescript": "javascript", "ts": "javascript", "tsx": "javascript",
    "typescriptreact": "javascript", "golang": "go", "rs": "rust",
}


def canonical_language(language: str) -> str:
    """Map an editor language id (``typescriptreact``, ``py``...) to one of :data:`LANGUAGES`.

    TypeScript shares the JavaScript lexer and background model: the surface syntax of expressions and
    statements is the same, and one larger model beats two thinner ones.
    """
    lang = language.lower()
    lang = _ALIASES.get(lang, lang)
    return lang if lang in LANGUAGES else "generic"


@cache
def _pattern(language: str) -> re.Pattern[str]:
    ops = sorted(set(_LANG_OPS[language]), key=len, reverse=True)
    op_alt = "|".join(re.escape(o) for o in ops)
    short_strings = "|".join(
        f"{re.escape(q)}[^{re.escape(q)}\\\\\\s]{{0,40}}{re.escape(q)}" for q in _QUOTES[language]
    )
    # Order matters: the first alternative that matches wins, and every alternative is bounded or ends
    # at the first character its class excludes, so a failed alternative costs O(1) or O(40).
    pattern = (
        r"\r?\n[ \t]*"                      # newline plus the next line's indentation
        r"| ?[^\W\d]\w*"                    # identifier (unicode letters allowed), optional leading blank
        r"| ?\d[\w.]*"                      # number literal, including 0x.., 1.5e3, 10_000u32
        rf"| ?(?:{short_strings})"          # short blank-free string literal kept whole
        rf"| ?(?:{op_alt})"          # multi-character operator
        r"| ?[^\s\w]"                       # any other single punctuation character
        r"|[ \t]+(?=[\r\n]|\Z)"             # trailing blanks
        r"|[ \t]+(?=[ \t])"                 # a run of blanks: all but the last, which glues to the next
        r"|\s"                              # any other whitespace character (\f, \v, lone \r...)
    )
    return re.compile(pattern)


def tokenize(text: str, language: str = "generic") -> list[str]:
    """Split ``text`` into tokens; ``"".join(tokenize(text)) == text`` always holds."""
    pat = _pattern(canonical_language(language))
    return pat.findall(text)
