"""A small file to try edit-engine on: the cursor goes at the start of line 14 (the empty line)."""

from __future__ import annotations


def mean(values: list[float]) -> float:
    """Arithmetic mean of a non-empty list."""
    return sum(values) / len(values)


def variance(values: list[float]) -> float:
    """Population variance."""
    m = mean(values)
    
    return total / len(values)


if __name__ == "__main__":
    print(variance([1.0, 2.0, 4.0]))
