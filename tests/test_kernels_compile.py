"""Every Triton kernel compiles for a Hopper GPU (sm_90) with the launch configuration its launcher uses there.

The interpreter tests check the arithmetic but never run the GPU compiler, which rejects things the interpreter
accepts (``tl.dot`` blocks under 16, mismatched loop-carried types, bad casts). Triton compiles ahead of time
without a GPU or driver, down to the cubin, so this runs on the CPU. It runs in a child process: the
interpreter patches ``triton.language`` while it runs kernels, and those patches break compiling in the same
process. The block sizes here mirror the launchers' GPU sizes; change both together.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
I32, F32, U8, I64 = "i32", "fp32", "*u8", "*i64"
BIG = 2**31 - 1


def _cases(dt: str) -> list[tuple[str, list[str], dict[str, Any]]]:
    """(kernel, types of its runtime arguments in order, constexprs) as the CUDA launch passes them."""
    p = f"*{dt}"
    f32 = dt == "fp32"
    return [
        ("_row_stats_kernel", [p, I32, I32, I32, I64, I64, "*fp32"],
         {"HAS_CHOICE": True, "BLOCK_R": 1, "BLOCK_V": 1024, "BIG": BIG}),
        ("_commit_kernel", [I64, "*fp32", I64, U8, "*fp32", U8, I32, F32, I32, I32],
         {"BLOCK_I": 64, "BLOCK_J": 64, "SPREAD": 2}),
        ("_rms_norm_kernel", [p] * 5 + [I32, I32, I32, I32, F32],
         {"HAS_DELTA": True, "BLOCK_R": 1, "BLOCK_D": 1024}),
        ("_rotary_kernel", [p] * 6 + [I32] * 12, {"HALF": 32, "BLOCK_T": 1, "BLOCK_HALF": 32}),
        ("_split_kernel", [p, p, p, U8, "*fp32", "*fp32"] + [I32] * 19 + [F32],
         {"HD": 64, "HAS_VALID": True, "BLOCK_C": 64, "BLOCK_N": 64, "BLOCK_D": 64, "F32": f32}),
        ("_combine_kernel", ["*fp32", "*fp32", p] + [I32] * 11, {"HD": 64, "BLOCK_C": 64, "BLOCK_D": 64}),
        ("_head_split_kernel", [p, p, U8, "*fp32", "*fp32", "*i32"] + [I32] * 10,
         {"HAS_PAD_BAN": True, "HAS_BIAS": True, "BLOCK_M": 64, "BLOCK_V": 64, "BLOCK_K": 64, "F32": f32, "BIG": BIG}),
        ("_head_combine_kernel", ["*fp32", "*i32", I64, "*fp32", I32, I32], {"BLOCK_R": 128}),
    ]


def compile_all(dt: str) -> list[str]:
    """Compile the kernels for sm_90 (in this process, which must not have run the interpreter)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from edit_engine.kernels import (
        _triton_attention,
        _triton_commit,
        _triton_head,
        _triton_rmsnorm,
        _triton_rotary,
    )

    found: dict[str, Any] = {}
    for mod in (_triton_attention, _triton_commit, _triton_head, _triton_rmsnorm, _triton_rotary):
        found |= {k: v for k, v in vars(mod).items() if isinstance(v, triton.runtime.JITFunction)}
    target = GPUTarget("cuda", 90, 32)
    done = []
    for name, types, consts in _cases(dt):
        if dt == "fp32" and "F32" not in consts:
            continue  # fp32 changes the code only where the dots compute in exact fp32
        fn = found[name]
        runtime = [a for a in fn.arg_names if a not in consts]
        assert len(runtime) == len(types), f"{name}: {len(runtime)} runtime arguments, {len(types)} types"
        signature = dict(zip(runtime, types, strict=True)) | {k: "constexpr" for k in consts}
        compiled = triton.compile(ASTSource(fn, signature, constexprs=consts), target=target)
        assert compiled.asm.get("cubin"), f"{name}: no cubin"
        done.append(name)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["bf16", "fp32"])
def test_kernels_compile_for_sm90(dt: str) -> None:
    pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when it is unset
    r = subprocess.run([sys.executable, __file__, dt], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"compiling for sm_90 failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    expected = [n for n, _, c in _cases(dt) if dt != "fp32" or "F32" in c]
    assert r.stdout.split() == ["compiled", *expected]


if __name__ == "__main__":
    print("compiled", *compile_all(sys.argv[1]))
