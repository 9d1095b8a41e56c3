"""``edit-engine infill FILE --line L --col C``: fill at a cursor (or rewrite a selection) and print the fill.

``--stream`` on a terminal redraws the span in place (rich) as the passes sharpen it: committed text with a dim
placeholder where each slot still undecided sits, under a line with the pass, the forward passes and the time
so far.
Piped, it prints every pass as plain lines (``--- pass N (M masked)`` then the text), with no escape codes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from edit_engine.cli.args import SAMPLER_FLAGS, UserError, add_dtype_arg, add_sampler_args, sampler_overrides

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from edit_engine.engine import Pass

PLACEHOLDER = "\u2591"  # light shade: one per undecided slot (``engine.PLACEHOLDER``, imported lazily)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("infill", help="fill at a cursor position of a file and print the fill")
    p.add_argument("file", help="source file")
    p.add_argument("--line", type=int, required=True, help="1-based line of the cursor")
    p.add_argument("--col", type=int, required=True, help="1-based column of the cursor, in characters")
    p.add_argument("--end-line", type=int, help="1-based end line of a selection to rewrite")
    p.add_argument("--end-col", type=int, help="1-based end column of a selection (exclusive)")
    p.add_argument("--language", help="language id (default: from the file extension)")
    p.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    add_dtype_arg(p)
    add_sampler_args(p, ("max_tokens",))
    add_sampler_args(p, (*SAMPLER_FLAGS, "temperature"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--stream", action="store_true", help="print every refinement pass as it comes")
    p.add_argument("--mode", choices=("insert", "rewrite"), default="insert",
                   help="rewrite: refine the selected text instead of filling it from scratch")
    p.add_argument("--no-repair", action="store_true", help="skip re-masking fills that do not parse")
    p.add_argument("--no-memory", action="store_true",
                   help="the model and copies only: no drafts from the memory of code")
    p.set_defaults(handler=run)


def run(a: argparse.Namespace) -> int:
    from edit_engine.engine import Engine, language_for_path
    from edit_engine.syntax.positions import offset_of_line_col

    path = Path(a.file)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {a.file}: {e.strerror or e}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{a.file} is not valid UTF-8 (byte {e.start})") from e
    try:
        offset = offset_of_line_col(text, a.line, a.col)
        selection = None
        if a.end_line is not None or a.end_col is not None:
            if a.end_line is None or a.end_col is None:
                raise UserError("--end-line and --end-col go together")
            end = offset_of_line_col(text, a.end_line, a.end_col)
            if end < offset:
                raise UserError("the selection ends before it starts")
            selection = (offset, end)
    except ValueError as e:
        raise UserError(str(e)) from e
    engine = Engine.load(a.model, dtype=a.dtype, memory=not a.no_memory)
    overrides = sampler_overrides(a, (*SAMPLER_FLAGS, "temperature"))
    lang = a.language or language_for_path(path)
    kw = dict(language=lang, selection=selection, max_tokens=a.max_tokens, seed=a.seed, mode=a.mode,
              repair=not a.no_repair, **overrides)
    if a.stream and not a.json:
        last = show_stream(engine.stream_complete(text, offset, **kw), text)  # type: ignore[arg-type]
        _say_doubt(last.text if last else "", last.estimate if last else None, engine.rt.gate.threshold)
        return 0
    r = engine.complete(text, offset, **kw)  # type: ignore[arg-type]
    if a.json:
        print(json.dumps(r.to_json(text)))
    else:
        sys.stdout.write(r.text + ("" if r.text.endswith("\n") else "\n"))
        _say_doubt(r.text, r.estimate, engine.rt.gate.threshold)
    return 0


def _say_doubt(text: str, estimate: float | None, threshold: float) -> None:
    """On stderr: a fill the show gate finds unlikely (an editor would show nothing there) is said to be so."""
    if text.strip() and estimate is not None and estimate < threshold:
        print(f"note: the engine gives this fill a {estimate:.1%} chance of being what you would write; an editor "
              f"would show nothing here (it shows from {threshold:.0%})", file=sys.stderr)


def show_stream(passes: Iterable[Pass], document: str, console: Console | None = None) -> Pass | None:
    """Show a stream of passes: redrawn in place on a terminal, plain lines otherwise. Returns the last pass."""
    from rich.console import Console

    console = console or Console(highlight=False)
    if not console.is_terminal:
        last = None
        for p in passes:
            tag = "final" if p.final else f"{p.masked} masked"
            console.file.write(f"--- pass {p.index} ({tag})\n{p.text}\n")
            console.file.flush()
            last = p
        return last
    from rich.live import Live

    t0, last = time.perf_counter(), None
    with Live(console=console, auto_refresh=False) as live:
        for p in passes:
            live.update(render_pass(p, document, (time.perf_counter() - t0) * 1e3), refresh=True)
            last = p
    return last


def render_pass(p: Pass, document: str, ms: float) -> RenderableType:
    """One pass as the terminal shows it: a status line, then the span between the dim text around it on its
    lines, each undecided slot a dim placeholder where it sits (the pass's ``preview``)."""
    from rich.console import Group
    from rich.text import Text

    state = f"final ({p.stop_reason})" if p.final and p.stop_reason else "final" if p.final else f"{p.masked} masked"
    passes = f"{p.nfe} forward pass" + ("" if p.nfe == 1 else "es")
    head = Text.assemble((f"pass {p.index}", "bold"), f"  {state}  ", (f"{passes}  {ms:.1f} ms", "cyan"))
    line_start = document.rfind("\n", 0, p.start) + 1
    line_end = document.find("\n", p.end)
    body = Text.assemble((document[line_start : p.start], "dim"))
    if p.final or not p.preview:
        body.append(p.text, "bold green" if p.final else "")
    else:
        for part in re.split(f"({PLACEHOLDER}+)", p.preview):
            body.append(part, "dim" if part.startswith(PLACEHOLDER) else "")
    body.append(document[p.end : len(document) if line_end < 0 else line_end], "dim")
    return Group(head, body)
