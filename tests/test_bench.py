"""``edit-engine bench``: the JSON it prints (tiny model, tiny sizes through the hidden flags)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from edit_engine.cli import bench as bench_cli
from edit_engine.cli.main import main
from edit_engine.model import checkpoint
from edit_engine.model.network import PRESETS, DiffusionLM
from edit_engine.model.tokenizer import Tokenizer

TINY = ["--spans", "4,8", "--contexts", "64,100000", "--reps", "2", "--line-chars", "3",
        "--keystroke-context", "160", "--threads", "1"]


@pytest.fixture(scope="module")
def tiny_ar_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer: Tokenizer) -> Path:
    torch.manual_seed(1)
    model = DiffusionLM(dataclasses.replace(PRESETS["tiny"], objective="ar")).eval()
    d = tmp_path_factory.mktemp("tiny-ar-bench")
    checkpoint.save(d, model, tiny_tokenizer, {"note": "random weights, tests only"}, dtype=torch.float32)
    return d


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    torch_threads = torch.get_num_threads()
    try:
        assert main(["bench", "--json", *args]) == 0
    finally:
        torch.set_num_threads(torch_threads)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].split()[:3] == ["sampler", "context", "span"]  # the table comes first
    return json.loads(out[-1])  # type: ignore[no-any-return]


def test_bench_json_shape(capsys: pytest.CaptureFixture[str], tiny_checkpoint: Path,
                          tiny_ar_checkpoint: Path) -> None:
    r = _run(capsys, "--model", str(tiny_checkpoint), "--ar-model", str(tiny_ar_checkpoint), *TINY)
    assert {"rows", "keystroke", "machine", "command", "notes"} <= set(r)
    cfg = PRESETS["tiny"]
    contexts = {64, cfg.max_prefix + cfg.max_suffix}  # 100000 is clamped to the model's budget, with a note
    assert any("clamped" in n for n in r["notes"])
    cells = {(row["sampler"], row["span_tokens"], row["context_tokens"] > 100) for row in r["rows"]}
    samplers = ("naive", "nocache", "fast", "ar")
    assert cells == {(s, n, big) for s in samplers for n in (4, 8) for big in (False, True)}
    for row in r["rows"]:
        assert {"sampler", "span_tokens", "context_tokens", "p50_ms", "p95_ms", "nfe_per_token",
                "tokens_per_s", "reps"} <= set(row)
        assert 0 < row["p50_ms"] <= row["p95_ms"] and 1 <= row["reps"] <= 2 and row["tokens_per_s"] > 0
        assert row["context_tokens"] <= max(contexts)
        if row["sampler"] in ("naive", "ar"):
            assert row["nfe_per_token"] == 1.0  # one token per pass
        else:
            assert 0 < row["nfe_per_token"] <= 1.0
    k = r["keystroke"]
    # each engine types the line ROUNDS times, one whole session after the other
    n = 3 * bench_cli.ROUNDS
    assert k["keystrokes"] == 3 and len(k["times_ms"]["cached"]) == len(k["times_ms"]["uncached"]) == n
    for name in ("cached", "uncached"):
        assert 0 < k[name]["p50_ms"] <= k[name]["p95_ms"]
    assert k["identical_fills"] == 3  # the cache changes the latency, never the fill
    c = k["cache"]
    # every fill looks the context up once (a verified copy that is refused: twice), except the fills typed
    # through, which run no pass
    assert c["misses"] >= 1 and c["hits"] + c["partial"] + c["misses"] >= n - k["typed_through"]["cached"]
    assert 0 <= k["typed_through"]["cached"] < n
    assert {"cpu", "threads", "torch", "device"} <= set(r["machine"]) and r["machine"]["threads"] == 1
    assert r["command"].startswith("edit-engine bench --json") and "--ar-model" in r["command"]
    p = r["pass"]  # the pass against this machine's floors, one row per canvas size
    assert p["gemm_gflops"] > 0 and p["dtype"] == "float32"
    assert [row["canvas"] for row in p["rows"]] == [8, 16, 32, 64]
    for row in p["rows"]:
        assert row["pass_ms"] > 0 and row["overhead_floor_ms"] > 0 and row["gflop"] > 0
        want = row["pass_ms"] / (row["arithmetic_floor_ms"] + row["overhead_floor_ms"])
        assert row["ratio"] == pytest.approx(want, rel=0.05, abs=0.02)


def test_bench_without_ar_model_skips_its_rows(capsys: pytest.CaptureFixture[str],
                                               tiny_checkpoint: Path) -> None:
    r = _run(capsys, "--model", str(tiny_checkpoint), "--spans", "4", "--contexts", "64", "--reps", "1",
             "--line-chars", "2", "--keystroke-context", "160", "--threads", "1")
    assert {row["sampler"] for row in r["rows"]} == {"naive", "nocache", "fast"}
    assert any("--ar-model" in n for n in r["notes"])


def test_the_packaged_models_bench_has_the_packaged_ar_baseline_unless_told_not_to(
        monkeypatch: pytest.MonkeyPatch, tiny_checkpoint: Path, tiny_ar_checkpoint: Path) -> None:
    """Without ``--model``, the AR rows use the packaged baseline (here a stand-in folder); ``--no-ar`` skips them,
    and a model of one's own gets no baseline it was not trained beside."""
    from edit_engine.engine import Engine

    real = Engine.load
    loaded: list[object] = []

    def load(path: object = None, **kw: object) -> Engine:
        loaded.append(path)
        return real(tiny_checkpoint if path is None else path, **kw)  # type: ignore[arg-type]

    def stop(engine: Engine, ar: Engine | None, spec: object, progress: object = None) -> None:
        raise SystemExit(0 if ar is None else 7)  # the run itself is tested above

    monkeypatch.setattr(bench_cli, "AR_BASELINE", tiny_ar_checkpoint)
    monkeypatch.setattr(Engine, "load", staticmethod(load))
    monkeypatch.setattr(bench_cli, "run_bench", stop)
    for argv, want_ar in ((["bench"], True), (["bench", "--no-ar"], False),
                          (["bench", "--model", str(tiny_checkpoint)], False)):
        loaded.clear()
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert (e.value.code == 7) == want_ar, argv
        assert (tiny_ar_checkpoint in loaded) == want_ar


def test_bench_rejects_a_diffusion_model_as_ar(capsys: pytest.CaptureFixture[str],
                                               tiny_checkpoint: Path) -> None:
    assert main(["bench", "--model", str(tiny_checkpoint), "--ar-model", str(tiny_checkpoint)]) == 2
    assert "not an autoregressive checkpoint" in capsys.readouterr().err
