"""Next edit and apply run apart from fills: threads of their own, a bounded number of requests, and work that
stops when nobody waits for it.

Their work is CPU-bound Python (diffs, line matching, parses) and bounded per request by its budget
(``edit_engine.edits.budget``: time proportional to the request's size). ``EditWork.run`` gives it to
``workers`` threads that fills never use, admits at most ``workers + queue`` requests at once (beyond: an
``overloaded`` answer with Retry-After, never a wait behind an unbounded queue), and hands the work a
``should_stop`` that turns true when the request's awaiting task ends (its client went away, cancelled it, or a
newer request replaced it) or when ``gone`` says so: the work ends at its next step (``budget.Stopped``) and its
thread is free. A request's slot is released only when its thread is done, so abandoned work still counts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

from edit_engine.edits.budget import Stopped
from edit_engine.serve.errors import ServeError

_T = TypeVar("_T")


class EditWork:
    """A bounded pool for next edit and apply requests (see the module doc)."""

    def __init__(self, workers: int, queue: int, retry_after_s: int = 1) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max(1, workers), thread_name_prefix="edit-engine-edit")
        self.capacity = max(1, workers) + max(0, queue)
        self.retry_after_s = retry_after_s
        self._lock = threading.Lock()
        self.running = 0  # requests admitted whose thread has not finished

    def _release(self, _: object) -> None:
        with self._lock:
            self.running -= 1

    async def run(self, work: Callable[[Callable[[], bool]], _T], gone: Callable[[], bool] | None = None) -> _T:
        """``work(should_stop)`` in the pool. Raises ``ServeError`` (``overloaded`` when full, ``cancelled``
        when ``gone`` stopped it), and what the work raises (a ``ValueError`` is the caller's input)."""
        with self._lock:
            if self.running >= self.capacity:
                raise ServeError("overloaded", f"{self.running} edit requests are running or waiting (the limit); "
                                 "retry shortly", limit="max_edit_queue", retry_after=self.retry_after_s)
            self.running += 1
        ended = threading.Event()

        def should_stop() -> bool:
            return ended.is_set() or (gone is not None and gone())

        try:
            future = self._pool.submit(work, should_stop)
        except RuntimeError:  # shut down
            self._release(None)
            raise ServeError("overloaded", "the server is shutting down", retry_after=self.retry_after_s) from None
        future.add_done_callback(self._release)
        try:
            return await asyncio.wrap_future(future)
        except Stopped:
            raise ServeError("cancelled", "request cancelled (the client stopped waiting)") from None
        finally:
            ended.set()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
