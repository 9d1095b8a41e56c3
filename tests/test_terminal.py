"""``edit-engine infill --stream``: redrawn in place on a terminal (rich), plain lines when piped."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from edit_engine.cli.infill import PLACEHOLDER, show_stream
from edit_engine.engine import Pass

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample.py"
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TERMINAL_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR")

DOC = "def f(x):\n    return \n"
AT = DOC.index("return ") + len("return ")
P = PLACEHOLDER
PASSES = [  # each with its preview: the placeholders sit where the undecided slots are
    Pass(0, "", 6, False, 1, AT, AT, preview=P * 6),
    Pass(1, "x1", 4, False, 2, AT, AT, preview=f"x{P * 3}1{P}"),
    Pass(2, "x + 1", 1, False, 3, AT, AT, preview=f"x + 1{P}"),
    Pass(3, "x + 1.5", 0, True, 4, AT, AT, "complete"),
]


@pytest.fixture(autouse=True)
def _no_terminal_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich reads these: a test says itself whether the console is a terminal."""
    for name in TERMINAL_ENV:
        monkeypatch.delenv(name, raising=False)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in TERMINAL_ENV}
    return subprocess.run([sys.executable, "-m", "edit_engine.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**base, **(env or {})})


def test_forced_terminal_redraws_placeholders_then_the_final_text() -> None:
    out = io.StringIO()
    last = show_stream(iter(PASSES), DOC, Console(force_terminal=True, file=out, width=80))
    assert last == PASSES[-1]
    raw = out.getvalue()
    assert ESCAPE.search(raw), "no escape codes: not drawn as a terminal"
    text = ESCAPE.sub("", raw)
    first = text.index("pass 0")
    assert PLACEHOLDER * 6 in text[first : text.index("pass 1")]  # the empty first pass: six dim slots
    assert f"return x{P * 3}1{P}" in text  # in place, not after the committed text
    assert "6 masked" in text and "1 forward pass " in text and "4 forward passes" in text and " ms" in text
    tail = text[text.rindex("pass 3") :]
    assert "final (complete)" in tail and "    return x + 1.5" in tail and PLACEHOLDER not in tail
    assert "\x1b[1A" in raw  # the cursor goes back up: the span is redrawn in place


def test_plain_console_prints_one_block_per_pass() -> None:
    out = io.StringIO()
    show_stream(iter(PASSES), DOC, Console(file=out))
    text = out.getvalue()
    assert "\x1b" not in text and PLACEHOLDER not in text
    assert text.splitlines() == ["--- pass 0 (6 masked)", "", "--- pass 1 (4 masked)", "x1",
                                 "--- pass 2 (1 masked)", "x + 1", "--- pass 3 (final)", "x + 1.5"]


@pytest.mark.slow
def test_piped_stream_has_no_escape_codes() -> None:
    p = _cli("infill", str(SAMPLE), "--line", "14", "--col", "5", "--stream")
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\r" not in p.stdout and PLACEHOLDER not in p.stdout
    assert p.stdout.startswith("--- pass 0 (") and "(final)" in p.stdout


@pytest.mark.slow
def test_terminal_stream_of_the_packaged_model_ends_on_its_fill() -> None:
    args = ("infill", str(SAMPLE), "--line", "14", "--col", "5")
    want = json.loads(_cli(*args, "--json").stdout)["text"]
    p = _cli(*args, "--stream", env={"TTY_COMPATIBLE": "1", "COLUMNS": "100"})
    assert p.returncode == 0, p.stderr
    text = ESCAPE.sub("", p.stdout)
    assert PLACEHOLDER in text[: text.index("pass 1")]  # the first pass has undecided slots
    tail = text[text.rindex("final") :]
    assert want.strip() and want.strip() in tail and PLACEHOLDER not in tail
