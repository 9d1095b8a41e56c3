"""Fill-in-the-middle prompts as editors send them to an OpenAI-compatible ``/v1/completions``.

Clients written for autoregressive coders put the text after the cursor *inside* the prompt, between the FIM
tokens of the model they think they talk to (Zed's edit predictions, Continue, llama.vscode and others), and
send ``stop`` strings; ``split_fim`` recovers ``(prefix, suffix)`` from the common templates so that such a
client gets a real fill instead of a continuation of a prompt full of markers, and ``cut_at_stop`` applies
``stop`` as OpenAI does (the text ends before the first stop string, which is not included).
"""

from __future__ import annotations

import re

# (template, which group is the prefix): each matches a whole prompt.
_TEMPLATES: list[tuple[re.Pattern[str], int]] = [
    (re.compile(r"\A<fim_prefix>(.*)<fim_suffix>(.*)<fim_middle>\Z", re.S), 1),  # StarCoder, the common default
    (re.compile(r"\A<\|fim_prefix\|>(.*)<\|fim_suffix\|>(.*)<\|fim_middle\|>\Z", re.S), 1),  # Qwen, CodeGemma
    (re.compile(r"\A<\|code_prefix\|>(.*)<\|code_suffix\|>(.*)<\|code_middle\|>\Z", re.S), 1),  # GLM
    (re.compile(r"\A<PRE> (.*) <SUF>(.*) <MID>\Z", re.S), 1),  # Code Llama
    (re.compile("\\A<\uff5cfim\u2581begin\uff5c>(.*)<\uff5cfim\u2581hole\uff5c>(.*)<\uff5cfim\u2581end\uff5c>\\Z", re.S), 1),
    (re.compile(r"\A\[SUFFIX\](.*)\[PREFIX\](.*)\Z", re.S), 2),  # Codestral: the suffix comes first
]
MAX_STOP = 32  # stop strings per request
MAX_STOP_CHARS = 128


def split_fim(prompt: str) -> tuple[str, str] | None:
    """``(prefix, suffix)`` of a prompt written in a known FIM template, else None."""
    if "<" not in prompt and "[" not in prompt:
        return None
    for pattern, prefix_group in _TEMPLATES:
        m = pattern.match(prompt)
        if m is not None:
            return m.group(prefix_group), m.group(3 - prefix_group)
    return None


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """``text`` up to the first occurrence of any stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
