"""Fill-in-the-middle prompts as editors send them to an OpenAI-compatible ``/v1/completions``.

Clients written for autoregressive coders put the text after the cursor *inside* the prompt, between the FIM
tokens of the model they think they talk to (Zed's edit predictions, Continue, llama.vscode and others), and
send ``stop`` strings; ``split_fim`` recovers ``(prefix, suffix)`` from the common templates so that such a
client gets a real fill instead of a continuation of a prompt full of markers, and ``cut_at_stop`` applies
``stop`` as OpenAI does (the text ends before the first stop string, which is not included).
"""

from __future__ import annotations

# (opening marker, marker between the parts, closing marker, whether the prefix comes first): a prompt is
# the opening marker, one part, the middle marker, the other part and the closing marker, exactly.
_TEMPLATES: list[tuple[str, str, str, bool]] = [
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", True),  # StarCoder, the common default
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", True),  # Qwen, CodeGemma
    ("<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>", True),  # GLM
    ("<PRE> ", " <SUF>", " <MID>", True),  # Code Llama
    ("<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>", "<\uff5cfim\u2581end\uff5c>", True),  # DeepSeek
    ("[SUFFIX]", "[PREFIX]", "", False),  # Codestral: the suffix comes first
]
MAX_STOP = 32  # stop strings per request
MAX_STOP_CHARS = 128


def split_fim(prompt: str) -> tuple[str, str] | None:
    """``(prefix, suffix)`` of a prompt written in a known FIM template, else None. String operations only:
    linear in the prompt whatever it holds (a pattern with two greedy groups took quadratic time on a prompt
    of many middle markers and no closing one). Where the middle marker occurs more than once, the first part
    runs to its last occurrence."""
    for start, middle, end, prefix_first in _TEMPLATES:
        if not prompt.startswith(start) or not prompt.endswith(end) or len(prompt) < len(start) + len(end):
            continue
        first, found, second = prompt[len(start) : len(prompt) - len(end)].rpartition(middle)
        if found:
            return (first, second) if prefix_first else (second, first)
    return None


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """``text`` up to the first occurrence of any stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
