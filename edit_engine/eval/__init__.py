"""Evaluation beside the engine (nothing in the serving path imports it): benchmark loading, a sandboxed
program runner, the scoring harness, the context-gap probe, and the ``edit-engine eval`` command."""

from __future__ import annotations

from edit_engine.eval.benchmarks import BENCHMARKS, BenchmarkError, Task, load, resolve_data_dir
from edit_engine.eval.execution import ExecResult, Limits, run_program
from edit_engine.eval.harness import (
    Fill,
    Report,
    TaskResult,
    canonical_filler,
    empty_filler,
    evaluate,
    model_filler,
)

__all__ = [
    "BENCHMARKS", "BenchmarkError", "ExecResult", "Fill", "Limits", "Report", "Task", "TaskResult",
    "canonical_filler", "empty_filler", "evaluate", "load", "model_filler", "resolve_data_dir", "run_program",
]
