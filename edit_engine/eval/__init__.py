"""Evaluation beside the engine (nothing in the serving path imports it): benchmark loading, a sandboxed
program runner, the scoring harness, the context-gap probe, and the ``edit-engine eval`` command."""

from __future__ import annotations

from .benchmarks import BENCHMARKS, BenchmarkError, Task, load, resolve_data_dir
from .execution import ExecResult, Limits, run_program
from .harness import Fill, Report, TaskResult, canonical_filler, empty_filler, evaluate, model_filler

__all__ = [
    "BENCHMARKS", "BenchmarkError", "ExecResult", "Fill", "Limits", "Report", "Task", "TaskResult",
    "canonical_filler", "empty_filler", "evaluate", "load", "model_filler", "resolve_data_dir", "run_program",
]
