"""A least-recently-used mapping bounded in entries and in bytes, for the caches that keep request-sized data
(documents' syntax trees, related files' span tables, whole texts).

Each entry's size is its owner's estimate, cheap to compute (a text's ``sys.getsizeof``, a tree's node count or a
table's key count times a factor measured where the cache is defined). ``put`` makes the entry the most recent
and drops the least recently used ones until both bounds hold; an entry larger than the whole byte budget is not
kept (nor is an older entry of its key). ``held()`` sums the estimates of every live cache by name, for tests and
diagnostics. Thread-safe.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")

_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()  # every BoundedLRU alive
_LIVE_LOCK = threading.Lock()


class BoundedLRU(Generic[K, V]):
    """Values by key, least recently used first out, within ``max_entries`` entries and ``max_bytes`` bytes."""

    def __init__(self, max_entries: int, max_bytes: int, name: str = "") -> None:
        if max_entries < 0 or max_bytes < 0:
            raise ValueError(f"bounds must be >= 0; got {max_entries} entries, {max_bytes} bytes")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.name = name
        self.evictions = 0  # entries dropped to keep the bounds, and entries too large to keep
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        with _LIVE_LOCK:
            _LIVE.add(self)

    @property
    def nbytes(self) -> int:
        """The estimated bytes of the entries held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        """The value at ``key`` (now the most recent), else ``default``."""
        with self._lock:
            got = self._items.get(key)
            if got is None:
                return default
            self._items.move_to_end(key)
            return got[0]

    def peek(self, key: K) -> V | None:
        """The value at ``key``, its recency unchanged; None when absent."""
        with self._lock:
            got = self._items.get(key)
            return None if got is None else got[0]

    def put(self, key: K, value: V, nbytes: int) -> bool:
        """Keep ``value`` at ``key`` as the most recent entry, ``nbytes`` its estimated size; False (and nothing
        kept at ``key``) when it alone is over either bound."""
        with self._lock:
            self._remove(key)
            if nbytes > self.max_bytes or self.max_entries == 0:
                self.evictions += 1
                return False
            self._items[key] = (value, nbytes)
            self._bytes += nbytes
            self._trim()
            return True

    def resize(self, key: K, nbytes: int) -> None:
        """Set the estimated size of the entry at ``key`` (its value changed in place), its recency unchanged;
        older entries go when the budget is passed, and the entry itself when it alone is over it."""
        with self._lock:
            got = self._items.get(key)
            if got is None:
                return
            self._bytes += nbytes - got[1]
            self._items[key] = (got[0], nbytes)
            if nbytes > self.max_bytes:
                self._remove(key)
                self.evictions += 1
            self._trim()

    def pop(self, key: K) -> V | None:
        """Remove the entry at ``key``; its value, or None when there was none."""
        with self._lock:
            got = self._remove(key)
            return None if got is None else got[0]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def _remove(self, key: K) -> tuple[V, int] | None:
        got = self._items.pop(key, None)
        if got is not None:
            self._bytes -= got[1]
        return got

    def _trim(self) -> None:
        while self._items and (len(self._items) > self.max_entries or self._bytes > self.max_bytes):
            _, (_, n) = self._items.popitem(last=False)
            self._bytes -= n
            self.evictions += 1


def held() -> dict[str, int]:
    """Estimated bytes held by every live ``BoundedLRU``, summed by name."""
    with _LIVE_LOCK:
        caches = list(_LIVE)
    out: dict[str, int] = {}
    for c in caches:
        out[c.name] = out.get(c.name, 0) + c.nbytes
    return out
