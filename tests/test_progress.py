"""Progress on stderr: a tqdm bar on a terminal; whole lines, few of them and no carriage returns, in a log."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edit_engine.eval.benchmarks import BenchmarkError, resolve_data_dir
from edit_engine.train.progress import Progress

ROOT = Path(__file__).resolve().parents[1]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _data() -> Path | None:
    try:
        return resolve_data_dir(None)
    except BenchmarkError:
        return None


def test_a_log_gets_a_few_whole_lines() -> None:
    log = io.StringIO()
    bar = Progress(1000, "eval", "task", stream=log)
    for i in range(1, 1001):
        bar.update(i, f"{i} scored")
    bar.write("[note] half way")
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert text.splitlines() == ["[note] half way", text.splitlines()[-1]]
    assert text.splitlines()[-1].startswith("eval: 100%") and "1000/1000" in text and "1000 scored" in text


def test_a_log_gets_a_line_every_interval() -> None:
    log = io.StringIO()
    bar = Progress(None, "train", " steps", stream=log, every=0.0, initial=20)
    for step in (30, 40, 50):
        bar.update(step, f"loss {step / 10:.1f}")
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 4 and lines[0].startswith("train: 30 steps") and "loss 3.0" in lines[0]
    assert lines[-1].startswith("train: 50 steps") and "\r" not in log.getvalue()


def test_a_terminal_gets_a_bar_redrawn_in_place() -> None:
    term = _Terminal()
    bar = Progress(5, "eval", "task", stream=term)
    for i in range(1, 6):
        bar.update(i, "scored")
    bar.close()
    text = term.getvalue()
    assert "\r" in text and text.endswith("\n")  # tqdm redraws the line, and leaves it on close
    assert "5/5" in text.rsplit("\r", 1)[-1] and "scored" in text


def _run_logged(tmp_path: Path, *args: str) -> str:
    """Run the CLI with stdout and stderr to a file (no terminal); returns stderr's text."""
    err = tmp_path / "stderr.log"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    with open(tmp_path / "stdout.log", "w") as out, open(err, "w") as e:
        p = subprocess.run([sys.executable, "-m", "edit_engine.cli.main", *args], stdout=out, stderr=e, cwd=ROOT,
                           timeout=600, env=env)
    text = err.read_text()
    assert p.returncode == 0, text
    return text


@pytest.mark.slow
def test_training_logged_to_a_file_has_no_carriage_returns(tmp_path: Path, tiny_train_argv: list[str]) -> None:
    text = _run_logged(tmp_path, *tiny_train_argv, "--steps", "40")
    assert "\r" not in text, text[:500]
    lines = text.splitlines()
    assert len(lines) <= 6, lines
    assert any(ln.startswith("train: 100%") and "40/40" in ln and "loss" in ln for ln in lines), lines
    assert lines[-1].startswith("done: step 40")


@pytest.mark.skipif(_data() is None, reason="benchmark data (../shared/benchmarks) not present")
def test_eval_logged_to_a_file_has_no_carriage_returns(tmp_path: Path) -> None:
    text = _run_logged(tmp_path, "eval", "--benchmark", "santacoder-fim", "--canonical", "--limit", "40")
    assert "\r" not in text, text[:500]
    lines = text.splitlines()
    assert len(lines) <= 3 and "40/40" in lines[-1], lines
