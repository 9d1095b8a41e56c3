"""The serving dtype: ``Engine.load(dtype=...)``, ``EDIT_ENGINE_DTYPE``, ``--dtype`` and the server's ``dtype``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from edit_engine import Engine
from edit_engine.cli.main import main
from edit_engine.model.checkpoint import DTYPE_ENV, CheckpointError, parse_dtype, serving_dtype

PREFIX = "def area(radius):\n    \"\"\"The area of a circle.\"\"\"\n    return "
SUFFIX = "\n\n\nprint(area(2.0))\n"


@pytest.mark.parametrize(("name", "want"), [("bf16", torch.bfloat16), ("BFloat16", torch.bfloat16),
                                            (" fp32 ", torch.float32), ("float16", torch.float16)])
def test_names(name: str, want: torch.dtype) -> None:
    assert parse_dtype(name) is want


def test_unknown_name_says_what_is_accepted() -> None:
    with pytest.raises(ValueError, match=r"--dtype='int4'; expected one of float32, fp32, bfloat16"):
        parse_dtype("int4", "--dtype")


def test_asked_beats_environment_beats_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert serving_dtype(None) is torch.float32
    monkeypatch.setenv(DTYPE_ENV, "AUTO")
    assert serving_dtype(None, device="cuda") is torch.bfloat16
    monkeypatch.setenv(DTYPE_ENV, "bf16")
    assert serving_dtype(None) is torch.bfloat16
    assert serving_dtype("float32") is torch.float32 and serving_dtype(torch.float32) is torch.float32
    monkeypatch.setenv(DTYPE_ENV, "  ")
    assert serving_dtype(None) is torch.float32


def test_open_models_default_by_device_and_an_explicit_dtype_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open checkpoints: asked > EDIT_ENGINE_HF_DTYPE > EDIT_ENGINE_DTYPE > bf16 on CUDA, float32 on CPU."""
    from edit_engine.model.hf.loader import serving_dtype as hf_dtype

    monkeypatch.delenv(DTYPE_ENV, raising=False)
    monkeypatch.delenv("EDIT_ENGINE_HF_DTYPE", raising=False)
    assert hf_dtype("cuda", None) is torch.bfloat16 and hf_dtype("cpu", None) is torch.float32
    assert hf_dtype("cuda", "float32") is torch.float32 and hf_dtype("cpu", torch.bfloat16) is torch.bfloat16
    monkeypatch.setenv(DTYPE_ENV, "bf16")
    assert hf_dtype("cpu", None) is torch.bfloat16
    monkeypatch.setenv("EDIT_ENGINE_HF_DTYPE", "fp16")
    assert hf_dtype("cpu", None) is torch.float16 and hf_dtype("cpu", "fp32") is torch.float32


def test_a_bad_environment_value_is_a_checkpoint_error(monkeypatch: pytest.MonkeyPatch,
                                                       tiny_checkpoint: Path) -> None:
    monkeypatch.setenv(DTYPE_ENV, "half-ish")
    with pytest.raises(CheckpointError, match=DTYPE_ENV):
        Engine.load(tiny_checkpoint)


def test_engine_in_bf16(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert Engine.load(tiny_checkpoint).dtype == "float32"
    eng = Engine.load(tiny_checkpoint, dtype="bf16")
    assert eng.dtype == "bfloat16"
    assert all(p.dtype == torch.bfloat16 for p in eng.model.parameters())
    r = eng.infill("def f(x):\n    return ", "\n", max_tokens=8)
    assert r.nfe >= 1 and r.tokens >= 1
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    assert Engine.load(tiny_checkpoint).dtype == "bfloat16"


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "tol", "agree"), [("bf16", 0.05, 0.8), ("int8", 0.04, 0.85)])
def test_packaged_model_in_a_serving_dtype_tracks_float32(monkeypatch: pytest.MonkeyPatch, dtype: str, tol: float,
                                                          agree: float, int8_serving: None) -> None:
    """The packaged weights are stored in bf16, so in bf16 only the activations round; int8 rounds the linear
    layers' weights and inputs too. Either way the first pass's logits stay close to float32's and pick the same
    token in nearly every slot (measured: bf16 0.7% of the largest logit and every slot; int8 1.9% and 15 of
    16), and a whole fill still comes back."""
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    e32, other = Engine.load(), Engine.load(dtype=dtype)
    tok = e32.tokenizer
    p, s = e32.context_ids(PREFIX, SUFFIX)
    canvas = torch.full((1, 16), tok.mask_id)
    out = []
    for e in (e32, other):
        cache = e.model.encode_context([p], [s], 16)
        out.append(e.model.canvas_logits(canvas, cache)[0].float())
    a, b = out
    assert (a - b).abs().max() < tol * a.abs().max()
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= agree
    r = other.infill(PREFIX, SUFFIX, line_stop=True)
    assert r.text.strip() and r.nfe >= 1


@pytest.mark.parametrize("argv", [["infill", "examples/sample.py", "--line", "14", "--col", "5"],
                                  ["eval", "--benchmark", "humaneval-single"], ["bench", "--quick"], ["lsp"],
                                  ["serve"]])
def test_every_command_rejects_an_unknown_dtype(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A usage error (exit 2, what is accepted), before any model loads or any socket opens."""
    try:
        code = main([*argv, "--dtype", "int4"])
    except SystemExit as e:  # argparse's usage error
        code = e.code  # type: ignore[assignment]
    assert code == 2 and "expected one of" in capsys.readouterr().err


def test_eval_records_the_dtype(tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    from edit_engine.eval import benchmarks

    monkeypatch.delenv(DTYPE_ENV, raising=False)
    task = benchmarks.Task("t/0", "python", "def f():\n    return ", "\n", "1", single_line=True)
    monkeypatch.setattr(benchmarks, "load", lambda *a, **k: [task])
    assert main(["eval", "--benchmark", "santacoder-fim", "--model", str(tiny_checkpoint), "--dtype", "bf16",
                 "--json", "--no-progress"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["dtype"] == "bfloat16" and r["n"] == 1


def test_server_settings_check_the_dtype() -> None:
    from edit_engine.cli.main import build_parser
    from edit_engine.serve.settings import Settings

    with pytest.raises(ValueError, match="expected one of"):
        Settings(dtype="int4")
    s = Settings.resolve(build_parser().parse_args(["serve", "--dtype", "bf16"]), {})
    assert s.dtype == "bf16"
    assert Settings.resolve(None, {"EDIT_ENGINE_DTYPE": "bfloat16"}).dtype == "bfloat16"


def test_int8_declines_on_a_cpu_without_an_int8_unit(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Without VNNI/AMX oneDNN emulates the int8 GEMM (slower than float32): ``--dtype int8`` serves float32 and
    says why; with one it serves int8."""
    from edit_engine.kernels import int8

    monkeypatch.delenv(DTYPE_ENV, raising=False)
    monkeypatch.setattr(int8, "cpu_int8_units", lambda: ())
    with caplog.at_level("WARNING", logger="edit_engine"):
        eng = Engine.load(tiny_checkpoint, dtype="int8")
    assert eng.dtype == "float32" and "int8 declined" in caplog.text and "VNNI" in caplog.text
    monkeypatch.setattr(int8, "cpu_int8_units", lambda: ("avx512_vnni",))
    if int8.weight_qmax():
        assert Engine.load(tiny_checkpoint, dtype="int8").dtype == "int8"


def test_auto_picks_native_bf16_and_float32_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto``: bf16 on a GPU and on a CPU with avx512_bf16 or AMX; float32 on one without (never int8)."""
    from edit_engine.model import dtypes

    monkeypatch.delenv(DTYPE_ENV, raising=False)
    monkeypatch.setattr(dtypes, "cpu_flags", lambda: frozenset({"avx2", "avx512_vnni"}))
    assert serving_dtype("auto") is torch.float32 and serving_dtype(None, "auto") is torch.float32
    assert serving_dtype("auto", device="cuda") is torch.bfloat16
    monkeypatch.setattr(dtypes, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    assert serving_dtype(" Auto ") is torch.bfloat16 and serving_dtype("float32") is torch.float32
    assert dtypes.is_auto(None) and dtypes.is_auto("auto") and not dtypes.is_auto("fp32")
    with pytest.raises(ValueError, match="or auto"):
        dtypes.check_dtype_name("fast")


@pytest.mark.parametrize("need, served", [(0.9, torch.bfloat16), (1.01, torch.float32)])
def test_auto_serves_its_choice_only_after_the_probe_agrees(monkeypatch: pytest.MonkeyPatch, need: float,
                                                            served: torch.dtype,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """The packaged model under ``auto`` on a (pretended) bf16 CPU: bf16 agrees with float32 on the probe and is
    served; with an agreement no model reaches, float32 is served with a warning that says why."""
    from edit_engine.model import checkpoint, dtypes

    monkeypatch.delenv(DTYPE_ENV, raising=False)
    monkeypatch.setattr(dtypes, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    monkeypatch.setattr(checkpoint, "AUTO_AGREEMENT", need)
    with caplog.at_level("INFO", logger="edit_engine"):
        ck = checkpoint.load()
    assert ck.model.embed.weight.dtype is served
    assert "agrees with float32 on" in caplog.text
    assert ("serving float32" in caplog.text) == (served is torch.float32)
    assert checkpoint.load(dtype="float32").model.embed.weight.dtype is torch.float32  # asked: no probe


# The CPUs these machines have, and two more: the flags that choose a path, the dtype ``auto`` serves, and
# whether ``--dtype int8`` is served (an int8 dot-product unit).
CPUS = {
    "avx2": ("avx2 fma", torch.float32, False),
    "avx512-vnni": ("avx2 fma avx512f avx512_vnni", torch.float32, True),
    "avx512-vnni-bf16": ("avx2 fma avx512f avx512_vnni avx512_bf16", torch.bfloat16, True),
    "amx": ("avx2 avx512f amx_tile amx_bf16 amx_int8", torch.bfloat16, True),
    "none": ("none", torch.float32, False),
}


@pytest.mark.parametrize("cpu", CPUS)
def test_each_cpu_branch_is_served_whatever_this_machine_has(cpu: str, cpu_profile: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Each branch forced through ``EDIT_ENGINE_CPU_FLAGS``: the packaged model under ``auto`` loads in that CPU's
    dtype and fills; ``--dtype int8`` serves int8 exactly where the CPU has an int8 unit (where the GEMM sums a
    range exactly, which every CPU here does)."""
    from edit_engine.kernels import cpu as cpu_mod
    from edit_engine.kernels import int8

    flags, auto, int8_unit = CPUS[cpu]
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    cpu_profile(flags)
    assert cpu_mod.cpu_flags() == (frozenset() if flags == "none" else frozenset(flags.split()))
    assert serving_dtype("auto") is auto and serving_dtype("auto", device="cuda") is torch.bfloat16
    assert (int8.int8_serving_reason() == "") == (int8_unit and int8.weight_qmax() > 0)
    eng = Engine.load()
    assert eng.dtype == str(auto).removeprefix("torch.") and eng.model.embed.weight.dtype is auto
    assert eng.infill("def f(x):\n    return ", "\n", max_tokens=8).nfe >= 1
    if int8_unit and int8.weight_qmax():
        assert Engine.load(dtype="int8").dtype == "int8"
    else:
        assert Engine.load(dtype="int8").dtype == "float32"


def test_the_forced_flags_reach_a_child_process(cpu_profile: Any) -> None:
    """A server or editor a test starts sees the same CPU as the test (the variable is inherited)."""
    import subprocess
    import sys

    cpu_profile("avx512_bf16")
    code = "from edit_engine.model import dtypes; print(dtypes.serving_dtype('auto'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "torch.bfloat16"


def test_forcing_is_said_and_reported_flags_are_read_from_the_cpu(cpu_profile: Any) -> None:
    from edit_engine.kernels import cpu as cpu_mod

    cpu_profile("avx2")
    assert "forced by EDIT_ENGINE_CPU_FLAGS: avx2" in cpu_mod.describe()
    assert cpu_mod.present(("avx512_bf16", "avx2")) == ("avx2",)
