"""The CLI as a user runs it: a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edit_engine.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_infill_json_on_sample() -> None:
    p = run("infill", str(SAMPLE), "--line", "14", "--col", "5", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"text", "start", "end", "passes", "nfe", "elapsed_ms"} <= set(out)
    assert out["start"] == {"line": 14, "col": 5} and out["end"]["line"] >= 14
    assert out["nfe"] >= 1


@pytest.mark.slow
def test_infill_stream_prints_passes() -> None:
    p = run("infill", str(SAMPLE), "--line", "14", "--col", "5", "--stream")
    assert p.returncode == 0, p.stderr
    assert "--- pass 0" in p.stdout and "(final)" in p.stdout


def test_help_and_usage_errors_do_not_import_torch() -> None:
    """Every subcommand's flags are built, and a bad value rejected, before torch (or pygls, or FastAPI) loads."""
    code = ("import sys\nfrom edit_engine.cli import main as cli\ncli.build_parser()\n"
            "try:\n    cli.main(['infill', 'x.py', '--line', '1', '--col', '1', '--pad-threshold', '9'])\n"
            "except SystemExit as e:\n    assert e.code == 2, e.code\n"
            "heavy = sorted(m for m in ('torch', 'pygls', 'fastapi', 'lsprotocol') if m in sys.modules)\n"
            "print(','.join(heavy) or 'none')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "none" and "--pad-threshold" in p.stderr


def test_missing_file() -> None:
    p = run("infill", "no/such/file.py", "--line", "1", "--col", "1")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "cannot read" in p.stderr


@pytest.mark.parametrize(("line", "col"), [("0", "1"), ("999", "1"), ("1", "999")])
def test_position_outside_file(line: str, col: str) -> None:
    p = run("infill", str(SAMPLE), "--line", line, "--col", col)
    assert p.returncode == 2 and "outside" in p.stderr and p.stderr.count("\n") == 1


def test_unreadable_model(tmp_path: Path) -> None:
    p = run("infill", str(SAMPLE), "--line", "14", "--col", "5", "--model", str(tmp_path))
    assert p.returncode == 2 and "lacks" in p.stderr and p.stderr.count("\n") == 1


def test_invalid_utf8(tmp_path: Path) -> None:
    f = tmp_path / "bad.py"
    f.write_bytes(b"x = '\xff'\n")
    p = run("infill", str(f), "--line", "1", "--col", "1")
    assert p.returncode == 2 and "UTF-8" in p.stderr


@pytest.mark.parametrize("value", ["9", "-1", "x"])
def test_spread_out_of_range_is_a_usage_error(value: str) -> None:
    p = run("infill", str(SAMPLE), "--line", "14", "--col", "5", "--spread", value)
    assert p.returncode == 2 and "--spread" in p.stderr and "Traceback" not in p.stderr


def test_a_removed_sampler_setting_is_a_usage_error() -> None:
    """Settings that measurements rejected (remask, score) are gone from every command."""
    for flag in ("--remask", "--score"):
        p = run("infill", str(SAMPLE), "--line", "14", "--col", "5", flag, "0.5")
        assert p.returncode == 2 and "unrecognized arguments" in p.stderr


@pytest.mark.parametrize("value", ["1.5", "-0.1", "x"])
def test_pad_threshold_out_of_range_is_a_usage_error(value: str) -> None:
    for cmd in (["infill", str(SAMPLE), "--line", "14", "--col", "5"], ["eval", "--benchmark", "humaneval-single"]):
        p = run(*cmd, "--pad-threshold", value)
        assert p.returncode == 2 and "--pad-threshold" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("value", ["-1", "1.5", "x"])
def test_floor_ramp_out_of_range_is_a_usage_error(value: str) -> None:
    for cmd in (["infill", str(SAMPLE), "--line", "14", "--col", "5"], ["eval", "--benchmark", "humaneval-single"]):
        p = run(*cmd, "--floor-ramp", value)
        assert p.returncode == 2 and "--floor-ramp" in p.stderr and "Traceback" not in p.stderr


def test_floor_ramp_takes_more_passes_than_the_full_floor() -> None:
    """The first pass commits one slot instead of the floor's eight, so a fill of several tokens takes more
    passes (no repair rounds: they would add passes of their own). ``--floor-ramp 0`` overrides the packaged
    model's ramp."""
    args = ("infill", str(SAMPLE), "--line", "14", "--col", "5", "--min-commit", "8", "--no-spread",
            "--threshold", "2", "--no-repair", "--json")
    full, ramp = run(*args, "--floor-ramp", "0"), run(*args, "--floor-ramp", "1")
    assert full.returncode == 0 and ramp.returncode == 0, (full.stderr, ramp.stderr)
    f, r = json.loads(full.stdout), json.loads(ramp.stdout)
    assert r["tokens"] > 1 and r["nfe"] > f["nfe"], (f, r)


def test_spread_radius_is_accepted() -> None:
    p = run("infill", str(SAMPLE), "--line", "14", "--col", "5", "--spread", "2", "--min-commit", "4", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["nfe"] >= 1


def test_infill_says_when_the_gate_doubts_the_fill(capsys: pytest.CaptureFixture[str]) -> None:
    from edit_engine.cli.infill import _say_doubt

    _say_doubt("return len(list1)", 0.005, 0.1)
    assert "0.5% chance" in capsys.readouterr().err
    for text, estimate in (("return total", 0.4), ("", 0.0), ("x", None)):
        _say_doubt(text, estimate, 0.1)
        assert capsys.readouterr().err == ""
