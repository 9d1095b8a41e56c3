"""Progress of a long run on stderr (training steps, evaluation tasks).

On a terminal it is a tqdm bar, redrawn in place. Anywhere else (a log file, a pipe, a CI log) it is a plain
line at most every ``every`` seconds and one at the end, formatted by tqdm too: a log gets whole lines and no
carriage returns.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """``update(n, note)`` as the run goes, ``write(line)`` for a message between redraws, ``close()`` at the
    end. ``total`` None: a count with a rate, no bar. ``initial``: where a resumed run starts counting."""

    def __init__(self, total: int | None, label: str, unit: str = "it", stream: TextIO | None = None,
                 every: float = 30.0, initial: int = 0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.label, self.unit, self.every, self.initial = total, label, unit, every, initial
        self.terminal = is_terminal(self.stream)
        self.n, self.note = initial, ""
        self.t0 = self._last = time.monotonic()
        self.bar = tqdm(total=total, desc=label, unit=unit, file=self.stream, initial=initial, leave=True,
                        dynamic_ncols=True, mininterval=0.25, disable=not self.terminal)

    def update(self, n: int, note: str = "") -> None:
        """The run is at ``n`` (of ``total``); ``note`` follows the count."""
        self.n, self.note = n, note
        if self.terminal:
            self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(n - self.bar.n)
        elif time.monotonic() - self._last >= self.every:
            self._line()

    def write(self, line: str) -> None:
        """A whole line of its own (above the bar on a terminal)."""
        if self.terminal:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.terminal:
            self.bar.set_postfix_str(self.note, refresh=False)
            self.bar.close()
        else:
            self._line()

    def _line(self) -> None:
        self._last = time.monotonic()
        text = tqdm.format_meter(self.n, self.total, self._last - self.t0, prefix=self.label, ascii=True,
                                 unit=self.unit, postfix=self.note or None, initial=self.initial)
        print(text, file=self.stream, flush=True)
