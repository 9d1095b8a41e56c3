"""Serving dtypes by name: the CLI's ``--dtype``, ``EDIT_ENGINE_DTYPE`` and ``EDIT_ENGINE_HF_DTYPE``."""

from __future__ import annotations

import os

import torch

# The names a serving dtype may be given by (the CLI's --dtype, EDIT_ENGINE_DTYPE, EDIT_ENGINE_HF_DTYPE).
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                                  "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
                                  "int8": torch.int8}
DTYPE_ENV = "EDIT_ENGINE_DTYPE"


def parse_dtype(name: str, where: str = "dtype") -> torch.dtype:
    """A serving dtype by name (``DTYPES``, any case); ``where`` names the setting in the error."""
    key = name.strip().lower()
    if key not in DTYPES:
        raise ValueError(f"{where}={name!r}; expected one of {', '.join(DTYPES)}")
    return DTYPES[key]


def serving_dtype(dtype: torch.dtype | str | None, default: torch.dtype = torch.float32) -> torch.dtype:
    """The dtype to serve in: the one asked for (a dtype or its name), else ``EDIT_ENGINE_DTYPE``, else
    ``default`` (the checkpoint family's: float32 for ours; ``hf.loader.serving_dtype`` for open models)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is not None:
        return parse_dtype(dtype)
    env = os.environ.get(DTYPE_ENV, "")
    return parse_dtype(env, DTYPE_ENV) if env.strip() else default
