"""Work budgets for next edit and apply: a request's work is counted, bounded and stoppable.

Both read request text of any shape (a history of thousands of hunks, a file of identical lines, a snippet of
thousands of chunks), and some of their steps cost more than linear time in the worst case. Each entry point opens
a ``scope``: a ``Budget`` of work steps (one step: about one line or token comparison) that the stages ``spend``
as they go, and a wall-clock deadline. Past either the request is refused (``OverBudget``, a ``ValueError``: the caller's input is too
much work, answered as invalid params with the reason); when the caller's ``should_stop`` says the client has gone
or cancelled, the work ends at the next step (``Stopped``). Either way a request costs at most a bounded time,
and a worker thread is freed as soon as nobody waits for its answer.

Stages call ``spend(n)`` without being handed the budget (a context variable carries it, set per thread), so the
same functions run unbudgeted outside a scope (tests, tools).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

# Steps a request may take: ``BASE_STEPS`` plus ``STEPS_PER_CHAR`` per character of its texts, at most
# ``MAX_STEPS`` (``limit``), so that its time is proportional to its size and bounded. Measured on a 2-core
# machine: 4 M steps of the costliest stages (line comparisons of apply's anchoring, difflib ratios of next
# edit's pairing) run in about half a second; on development sets (400 synthetic apply cases, 200 next-edit
# cases from real histories) requests take at most 1 k (apply) and 17 k (next edit) steps.
BASE_STEPS = 200_000
STEPS_PER_CHAR = 40
MAX_STEPS = 4_000_000
# Wall-clock seconds a request may take whatever its steps (the steps weigh the stages only roughly): past it,
# ``OverBudget`` too. Checked every ``CLOCK_EVERY`` steps.
DEADLINE_S = 2.0
CLOCK_EVERY = 4_096


class OverBudget(ValueError):
    """The request needs more work than its budget allows."""


class Stopped(Exception):
    """The caller stopped the request (its client went away, cancelled it, or a newer request replaced it)."""


@dataclass
class Budget:
    limit: int
    what: str
    should_stop: Callable[[], bool] | None = None
    spent: int = 0
    deadline: float = field(default_factory=lambda: time.monotonic() + DEADLINE_S)
    _clock: int = 0  # steps at the last look at the clock

    def spend(self, n: int = 1) -> None:
        self.spent += n
        if self.spent > self.limit:
            self._refuse(f"{self.limit:,} steps")
        if self.spent - self._clock >= CLOCK_EVERY:
            self._clock = self.spent
            if time.monotonic() > self.deadline:
                self._refuse(f"{DEADLINE_S:g} s")
        if self.should_stop is not None and self.should_stop():
            raise Stopped(self.what)

    def _refuse(self, what: str) -> None:
        raise OverBudget(f"{self.what} needs more work than its budget allows ({what}): send a smaller text, "
                         "fewer or smaller changes, or more distinctive context lines")


def limit(*texts: str) -> int:
    """The steps a request over ``texts`` may take."""
    return min(MAX_STEPS, BASE_STEPS + STEPS_PER_CHAR * sum(len(t) for t in texts))


_current: ContextVar[Budget | None] = ContextVar("edit_engine_budget", default=None)


def spend(n: int = 1) -> None:
    """Count ``n`` steps against the budget in scope (nothing outside one). Raises ``OverBudget`` or ``Stopped``."""
    b = _current.get()
    if b is not None:
        b.spend(n)


def current() -> Budget | None:
    return _current.get()


@contextlib.contextmanager
def scope(limit: int, what: str, should_stop: Callable[[], bool] | None = None) -> Iterator[Budget]:
    """A budget for the work inside the block. A scope inside another one adds to it: the outer budget is the one
    that counts, and its caller's ``should_stop`` (an entry point called by another shares its caller's budget)."""
    outer = _current.get()
    if outer is not None:
        yield outer
        return
    b = Budget(limit, what, should_stop)
    token = _current.set(b)
    try:
        yield b
    finally:
        _current.reset(token)
