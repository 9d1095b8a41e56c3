"""What this CPU computes natively: the feature flags that pick a serving path (bf16 arithmetic, int8 dot
products).

One place reads them, so one setting can pretend to be another CPU: ``EDIT_ENGINE_CPU_FLAGS`` (flags separated
by spaces or commas, as /proc/cpuinfo spells them; ``none`` for an empty set) replaces what the CPU reports.
Tests set it to exercise each branch on any machine; a user can set it to keep a path the CPU would take, e.g.
``EDIT_ENGINE_CPU_FLAGS=avx2`` serves float32 under ``auto`` on a bf16 CPU.
"""

from __future__ import annotations

import functools
import os

CPU_FLAGS_ENV = "EDIT_ENGINE_CPU_FLAGS"
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # native bf16 arithmetic
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # int8 dot-product units
REPORTED = ("avx2", "fma", "avx512f", *VNNI_FLAGS, *BF16_FLAGS, "amx_tile")  # what ``describe`` names


@functools.lru_cache(maxsize=1)
def reported_flags() -> frozenset[str]:
    """The flags /proc/cpuinfo reports (empty where there is no such file: not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return frozenset(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return frozenset()


def cpu_flags() -> frozenset[str]:
    """The flags the serving paths are chosen by: ``EDIT_ENGINE_CPU_FLAGS`` where set, else ``reported_flags``."""
    forced = os.environ.get(CPU_FLAGS_ENV, "").replace(",", " ").split()
    if forced:
        return frozenset() if forced == ["none"] else frozenset(forced)
    return reported_flags()


def present(names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``names`` that ``cpu_flags`` has, in their order."""
    flags = cpu_flags()
    return tuple(n for n in names if n in flags)


def describe() -> str:
    """One line: the flags that choose a path, as reported and (where forced) as used."""
    seen = " ".join(f for f in REPORTED if f in reported_flags()) or "none of " + " ".join(REPORTED)
    forced = os.environ.get(CPU_FLAGS_ENV, "").strip()
    return f"cpu flags: {seen}" + (f" (forced by {CPU_FLAGS_ENV}: {forced})" if forced else "")
