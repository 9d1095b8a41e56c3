"""``--plot DIR``: PNG files from bench and eval results (matplotlib), and a one-line error without it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from edit_engine.cli import plots
from edit_engine.cli.main import main
from edit_engine.eval.benchmarks import BenchmarkError, resolve_data_dir

PNG = b"\x89PNG\r\n\x1a\n"


def _has_data() -> bool:
    try:
        resolve_data_dir(None)
    except BenchmarkError:
        return False
    return True


def _bench_result() -> dict[str, Any]:
    rows = []
    for context in (256, 352):
        for span in (16, 64):
            for sampler, nfe, ms in (("naive", 1.0, 40.0), ("nocache", 0.3, 12.0), ("fast", 0.3, 5.0)):
                times = [ms * span * (1 + 0.1 * k) for k in range(3)]
                rows.append({"sampler": sampler, "span_tokens": span, "context_tokens": context,
                             "p50_ms": times[1], "p95_ms": times[2], "nfe_per_token": nfe,
                             "tokens_per_s": 1e3 * span / times[1], "reps": 3, "times_ms": times})
    return {"rows": rows, "keystroke": {"keystrokes": 8, "times_ms": {"cached": [30.0, 32.5, 41.0, 35.0],
                                                                    "uncached": [70.0, 75.0, 90.0, 81.0]}},
            "machine": {"cpu": "test cpu", "threads": 1, "device": "cpu"}, "command": "edit-engine bench --quick"}


def _assert_pngs(paths: list[Path], names: list[str]) -> None:
    assert [p.name for p in paths] == names
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 8_000, (p, len(data))


def test_bench_plots_from_a_result(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    paths = plots.bench_plots(_bench_result(), tmp_path / "new" / "dir")
    _assert_pngs(paths, ["bench_latency.png", "bench_passes.png"])


def test_bench_plots_without_keystroke_times_or_runs(tmp_path: Path) -> None:
    """An older result: rows without their runs' times, no keystroke times."""
    pytest.importorskip("matplotlib")
    r = _bench_result()
    for row in r["rows"]:
        del row["times_ms"]
    del r["keystroke"]
    _assert_pngs(plots.bench_plots(r, tmp_path), ["bench_latency.png", "bench_passes.png"])


def test_sweep_plot_puts_each_setting_at_its_speed_and_quality(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [{"threshold": 0.9, "pad_threshold": p, "min_commit": f, "exact_match": 0.1 * f + p / 10,
             "edit_sim": 0.4 + 0.05 * f, "ms_per_fill": 120.0 / f, "nfe_per_token": 1.0 / f, "edit_sims": [0.5] * 4}
            for f in (1, 2, 4) for p in (0.0, 0.7)]
    path = plots.sweep_plot({"rows": rows, "n": 4, "holes": "lines", "command": "sweep"}, tmp_path / "s.png")
    _assert_pngs([path], ["s.png"])
    with pytest.raises(ValueError, match="no rows"):
        plots.sweep_plot({"rows": []}, tmp_path / "t.png")


def test_eval_plots_by_benchmark_and_hole_kind(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    canon = ["", "x\n", "a\nb\n", "1\n2\n3\n4\n5\n6\n"]
    records = [{"benchmark": b, "kind": plots.hole_kind(canon[i % 4]), "passed": i % 3 == 0,
                "elapsed_ms": 20.0 + 7 * i} for b in ("humaneval-single", "humaneval-multi") for i in range(12)]
    report = {"benchmark": "humaneval-single", "metric": "pass_at_1", "fill": "model"}
    _assert_pngs(plots.eval_plots(report, records, tmp_path), ["eval_score.png", "eval_latency.png"])


def test_hole_kinds() -> None:
    assert [plots.hole_kind(c) for c in ("", "  \n", "x", "x\n", "a\nb", "1\n2\n3\n4\n", "1\n2\n3\n4\n5")] == \
           ["empty", "empty", "1 line", "1 line", "2-4 lines", "2-4 lines", "5+ lines"]


@pytest.mark.parametrize("argv", [["bench", "--model", "no/such/model"],
                                  ["eval", "--benchmark", "santacoder-fim", "--canonical"]])
def test_plot_without_matplotlib_is_a_one_line_error(argv: list[str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Before any work (the bench's model path does not even exist): exit 2, one line naming the extra."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert main([*argv, "--plot", str(tmp_path / "img")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib" in err and "edit-engine[plot]" in err
    assert not (tmp_path / "img").exists()


@pytest.mark.skipif(not _has_data(), reason="benchmark data (../shared/benchmarks) not present")
def test_eval_cli_writes_its_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    assert main(["eval", "--benchmark", "santacoder-fim", "--canonical", "--limit", "12", "--no-progress",
                 "--plot", str(tmp_path)]) == 0
    assert "eval_score.png" in capsys.readouterr().err
    _assert_pngs([tmp_path / "eval_score.png", tmp_path / "eval_latency.png"], ["eval_score.png", "eval_latency.png"])


def test_bench_cli_writes_its_plots(tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    import torch

    threads = torch.get_num_threads()
    try:
        assert main(["bench", "--model", str(tiny_checkpoint), "--spans", "4", "--contexts", "64", "--reps", "2",
                     "--line-chars", "3", "--keystroke-context", "160", "--threads", "1",
                     "--plot", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    assert "bench_passes.png" in capsys.readouterr().err
    _assert_pngs([tmp_path / "bench_latency.png", tmp_path / "bench_passes.png"],
                 ["bench_latency.png", "bench_passes.png"])
