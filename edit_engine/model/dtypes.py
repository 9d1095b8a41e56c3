"""Serving dtypes by name: the CLI's ``--dtype``, ``EDIT_ENGINE_DTYPE`` and ``EDIT_ENGINE_HF_DTYPE``."""

from __future__ import annotations

import os

import torch

from edit_engine.kernels.cpu import BF16_FLAGS, cpu_flags

# The names a serving dtype may be given by (the CLI's --dtype, EDIT_ENGINE_DTYPE, EDIT_ENGINE_HF_DTYPE).
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                                  "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
                                  "int8": torch.int8}
DTYPE_ENV = "EDIT_ENGINE_DTYPE"


AUTO = "auto"  # the fastest path this machine computes natively and that passed its quality check (``auto_dtype``)


def parse_dtype(name: str, where: str = "dtype") -> torch.dtype:
    """A serving dtype by name (``DTYPES``, any case); ``where`` names the setting in the error. ``auto`` is
    resolved by ``serving_dtype``, which knows the device."""
    key = name.strip().lower()
    if key not in DTYPES:
        raise ValueError(f"{where}={name!r}; expected one of {', '.join(DTYPES)} or {AUTO}")
    return DTYPES[key]


def check_dtype_name(name: str, where: str = "dtype") -> str:
    """``name`` lower-cased when it is a dtype's name or ``auto``; else ValueError."""
    key = name.strip().lower()
    if key != AUTO:
        parse_dtype(key, where)
    return key


def auto_dtype(device: torch.device | str = "cpu") -> torch.dtype:
    """The ``auto`` choice for our model: bf16 on a GPU and on a CPU with native bf16 arithmetic (avx512_bf16 or
    AMX), float32 elsewhere. Per path, measured (docs/results-archive-2026-12-05.md, 2026-12-03): bf16 on the avx512_bf16 EPYC took
    the cached keystroke from 71-74 to 55-64 ms with HumanEval's editor's path level (42 = 42, 882 of 1,033 fills
    identical) and SantaCoder 17 against 16: kept. int8 was faster still (34-48 ms) but lost 4 HumanEval tasks
    and gained none (-0.46, SE 0.22): never chosen for you, ``--dtype int8`` asks for it. Without native bf16,
    bf16 is emulated and slower than float32. ``checkpoint.load`` also checks the choice against float32 on
    a probe before serving it (``checkpoint.AUTO_AGREEMENT``)."""
    if torch.device(device).type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if cpu_flags() & set(BF16_FLAGS) else torch.float32


def serving_dtype(dtype: torch.dtype | str | None, default: torch.dtype | str = torch.float32,
                  device: torch.device | str = "cpu") -> torch.dtype:
    """The dtype to serve in: the one asked for (a dtype or its name), else ``EDIT_ENGINE_DTYPE``, else
    ``default`` (the checkpoint family's: ``auto`` for ours; ``hf.loader.serving_dtype`` for open models).
    ``auto`` becomes ``auto_dtype(device)``."""
    if isinstance(dtype, torch.dtype):
        return dtype
    env = os.environ.get(DTYPE_ENV, "")
    if dtype is not None:
        name, where = dtype, "dtype"
    elif env.strip():
        name, where = env, DTYPE_ENV
    elif isinstance(default, torch.dtype):
        return default
    else:
        name, where = default, "default"
    if name.strip().lower() == AUTO:
        return auto_dtype(device)
    return parse_dtype(name, where)


def is_auto(dtype: torch.dtype | str | None) -> bool:
    """Whether this request (or, when None, ``EDIT_ENGINE_DTYPE``) leaves the dtype to ``auto``."""
    if isinstance(dtype, torch.dtype):
        return False
    name = dtype if dtype is not None else os.environ.get(DTYPE_ENV, "")
    return not name.strip() or name.strip().lower() == AUTO
