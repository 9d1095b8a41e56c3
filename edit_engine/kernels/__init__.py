"""Hot-path ops of the denoising pass: each a Triton kernel with a plain PyTorch twin.

The twin is the CPU path and the test oracle; ``kernels.dispatch`` picks one (``EDIT_ENGINE_KERNELS``).
Imported by the model and the sampler only.
"""

from edit_engine.kernels.attention import canvas_attention, canvas_attention_ref
from edit_engine.kernels.commit import (
    commit_from_stats,
    commit_from_stats_ref,
    commit_step,
    commit_step_ref,
    token_stats_ref,
)
from edit_engine.kernels.dispatch import backend, triton_available, use_triton
from edit_engine.kernels.head import head_token_stats, head_token_stats_ref
from edit_engine.kernels.int8 import Int8Linear, gemm_ok, int8_linear, int8_linear_ref, quantize_weight
from edit_engine.kernels.matmul import linear, linear_ref
from edit_engine.kernels.rmsnorm import add_rms_norm, add_rms_norm_ref, rms_norm, rms_norm_ref
from edit_engine.kernels.rotary import apply_rotary, apply_rotary_ref, rotary_tables
from edit_engine.kernels.rules import CommitRule, HeadBans, add_logit_bias

__all__ = [
    "add_logit_bias",
    "add_rms_norm",
    "add_rms_norm_ref",
    "apply_rotary",
    "apply_rotary_ref",
    "backend",
    "canvas_attention",
    "canvas_attention_ref",
    "CommitRule",
    "commit_step",
    "commit_step_ref",
    "commit_from_stats",
    "commit_from_stats_ref",
    "head_token_stats",
    "head_token_stats_ref",
    "HeadBans",
    "Int8Linear",
    "linear",
    "linear_ref",
    "gemm_ok",
    "int8_linear",
    "int8_linear_ref",
    "quantize_weight",
    "rms_norm",
    "rms_norm_ref",
    "rotary_tables",
    "token_stats_ref",
    "triton_available",
    "use_triton",
]
