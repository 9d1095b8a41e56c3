"""PNG plots of ``edit-engine bench`` and ``edit-engine eval`` results (``--plot DIR``).

matplotlib is an optional extra (``pip install 'edit-engine[plot]'``), imported on first use and drawn with its
Agg backend straight to files (``Figure`` objects, no pyplot state, no display needed).

- ``bench_plots(result, dir)``: ``bench_latency.png`` (each fill's wall time, a box per sampler in each
  context/span cell, and the keystroke scenario's fills with and without the context cache) and
  ``bench_passes.png`` (forward passes per fill, per sampler and cell).
- ``sweep_plot(result, path)``: speed against quality across sampler settings, from a commit-policy sweep
  (``benchmarks/sweep_commit.py --json``): ms per fill against exact match and edit similarity, a point per
  setting.
- ``eval_plots(report, records, dir)``: ``eval_score.png`` (the score by hole kind: how many lines the true
  hole has) and ``eval_latency.png`` (each task's fill time, by hole kind).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

MISSING = "--plot needs matplotlib: pip install 'edit-engine[plot]' (or matplotlib>=3.7)"
SAMPLER_COLOURS = {"naive": "tab:red", "nocache": "tab:orange", "fast": "tab:green", "ar": "tab:blue"}
KIND_ORDER = ("empty", "1 line", "2-4 lines", "5+ lines")


class PlotError(RuntimeError):
    """matplotlib is not installed (the message says how to get it)."""


def require(error: Callable[[str], Exception] = PlotError) -> None:
    """Raise ``error`` with the one-line reason unless matplotlib can be imported (checked before a long run, not
    after it). A command passes its own error type, the one it reports to the user without a traceback."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise error(MISSING) from e


def _figure(width: float, height: float, ratios: Sequence[float] = (1.0,)) -> tuple[Any, list[Any]]:
    """A figure on the Agg canvas with one panel per width ratio."""
    require()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(ratios), squeeze=False, width_ratios=list(ratios))[0]
    return fig, list(axes)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _legend(ax: Any, names: Iterable[str]) -> None:
    from matplotlib.patches import Patch

    names = list(names)
    ax.legend(handles=[Patch(color=SAMPLER_COLOURS.get(n, "tab:gray"), label=n) for n in names], fontsize=8,
              loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=len(names), frameon=False)


# ------------------------------------------------------------------------------------------------------ bench
def _cells(rows: Sequence[dict[str, Any]]) -> tuple[list[tuple[int, int]], list[str]]:
    """The (context, span) cells in order and the samplers present, in the bench's order."""
    cells = sorted({(int(r["context_tokens"]), int(r["span_tokens"])) for r in rows})
    names = [n for n in SAMPLER_COLOURS if any(r["sampler"] == n for r in rows)]
    names += sorted({r["sampler"] for r in rows} - set(names))
    return cells, names


def _grouped(ax: Any, rows: Sequence[dict[str, Any]], draw: Any) -> None:
    """Per cell, one mark per sampler side by side (``draw(ax, x, width, row, colour)``); cells on the x axis."""
    cells, names = _cells(rows)
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        for i, cell in enumerate(cells):
            row = next((r for r in rows if r["sampler"] == name
                        and (r["context_tokens"], r["span_tokens"]) == cell), None)
            if row is not None:
                draw(ax, i - 0.4 + width * (j + 0.5), width, row, SAMPLER_COLOURS.get(name, "tab:gray"))
    ax.set_xticks(range(len(cells)), [f"context {c}\nspan {s}" for c, s in cells], fontsize=8)
    _legend(ax, names)


def bench_latency(result: dict[str, Any], path: Path) -> Path:
    """Each fill's wall time: a box per sampler and cell (log scale), and the keystroke scenario's fills."""
    rows = result.get("rows", [])
    keystroke = result.get("keystroke") or {}
    times = keystroke.get("times_ms") or {}
    grid = max(6.0, 0.9 * len(_cells(rows)[0]) + 3)
    fig, axes = _figure(grid + 4 if times else grid, 4.5, (grid, 4.0) if times else (1.0,))

    def box(ax: Any, x: float, w: float, row: dict[str, Any], colour: str) -> None:
        ts = row.get("times_ms") or [row["p50_ms"]]
        ax.boxplot([ts], positions=[x], widths=w * 0.9, patch_artist=True, manage_ticks=False, showfliers=False,
                   boxprops={"facecolor": colour, "alpha": 0.5}, medianprops={"color": "black"})
        ax.scatter([x] * len(ts), ts, s=10, color=colour, edgecolors="black", linewidths=0.4, zorder=3)

    _grouped(axes[0], rows, box)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("ms per fill (log scale; dots: runs)")
    axes[0].set_title("fill latency per sampler")
    if times:
        ax = axes[1]
        names = [n for n in ("cached", "uncached") if n in times] + sorted(set(times) - {"cached", "uncached"})
        ax.boxplot([times[n] for n in names], patch_artist=True,
                   boxprops={"facecolor": "tab:green", "alpha": 0.5}, medianprops={"color": "black"})
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set_ylabel("ms per fill")
        ax.set_title(f"typing: a fill after each of {keystroke.get('keystrokes', '?')} keystrokes")
    _caption(fig, result)
    return _save(fig, path)


def bench_passes(result: dict[str, Any], path: Path) -> Path:
    """Forward passes per fill (nfe per token x span) per sampler and cell; the dotted mark is one per token."""
    rows = result.get("rows", [])
    fig, (ax,) = _figure(max(6.0, 0.9 * len(_cells(rows)[0]) + 3), 4.5)

    def bar(ax: Any, x: float, w: float, row: dict[str, Any], colour: str) -> None:
        passes = row["nfe_per_token"] * row["span_tokens"]
        ax.bar(x, passes, w * 0.9, color=colour, alpha=0.8)
        ax.annotate(f"{passes:.0f}", (x, passes), ha="center", va="bottom", fontsize=7)
        ax.hlines(row["span_tokens"], x - w / 2, x + w / 2, colors="black", linestyles="dotted", linewidth=1)

    _grouped(ax, rows, bar)
    ax.set_ylabel("forward passes per fill")
    ax.set_title("passes per fill (dotted: one pass per token)")
    _caption(fig, result)
    return _save(fig, path)


def _caption(fig: Any, result: dict[str, Any]) -> None:
    m = result.get("machine") or {}
    words = [str(m[k]) for k in ("cpu", "device") if m.get(k)]
    if m.get("threads"):
        words.append(f"{m['threads']} thread" + ("" if m["threads"] == 1 else "s"))
    if result.get("command"):
        words.append(str(result["command"]))
    if words:
        fig.supxlabel(", ".join(words), fontsize=7, color="dimgray")


def bench_plots(result: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """``bench_latency.png`` and ``bench_passes.png`` in ``out_dir`` from a bench JSON object."""
    d = Path(out_dir)
    return [bench_latency(result, d / "bench_latency.png"), bench_passes(result, d / "bench_passes.png")]


def _setting_label(row: dict[str, Any]) -> str:
    words = [f"floor {row.get('min_commit', 1)}"]
    if row.get("threshold") is not None:
        words.append(f"thr {row['threshold']:g}")
    if row.get("pad_threshold"):
        words.append(f"pad {row['pad_threshold']:g}")
    return ", ".join(words)


def sweep_plot(result: dict[str, Any], path: str | Path) -> Path:
    """Speed against quality: each sampler setting of a sweep at (median ms per fill, exact match) and (ms,
    edit similarity), labelled; the faster and better settings sit to the upper left."""
    rows = list(result.get("rows") or [])
    if not rows:
        raise ValueError("the sweep has no rows to plot")
    fig, (ax_em, ax_sim) = _figure(11, 4.2, (1.0, 1.0))
    for ax, key, name in ((ax_em, "exact_match", "exact match"), (ax_sim, "edit_sim", "edit similarity")):
        xs = [float(r["ms_per_fill"]) for r in rows]
        ys = [float(r[key]) for r in rows]
        ax.scatter(xs, ys, c=[float(r.get("nfe_per_token", 0)) for r in rows], cmap="viridis", s=36, zorder=3)
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.annotate(_setting_label(r), (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.set_xlabel("ms per fill (median)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    n, holes = result.get("n", len(rows[0].get("edit_sims", []))), result.get("holes", "lines")
    ax_em.set_title(f"speed against quality: {n} held-out {holes} holes (colour: passes per token)")
    _caption(fig, result)
    return _save(fig, Path(path))


# ------------------------------------------------------------------------------------------------------- eval
def hole_kind(canonical: str) -> str:
    """A hole's kind by the lines of its true text: empty, 1 line, 2-4 lines, 5+ lines."""
    if not canonical.strip():
        return "empty"
    n = canonical.rstrip("\n").count("\n") + 1
    return "1 line" if n == 1 else "2-4 lines" if n <= 4 else "5+ lines"


def _groups(records: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Records by (benchmark, hole kind), labelled by kind alone when there is one benchmark; "all" per
    benchmark first."""
    benchmarks = sorted({str(r.get("benchmark", "")) for r in records})
    out = []
    for b in benchmarks:
        mine = [r for r in records if str(r.get("benchmark", "")) == b]
        kinds = sorted({r["kind"] for r in mine}, key=lambda k: (KIND_ORDER.index(k) if k in KIND_ORDER else 9, k))
        prefix = f"{b}\n" if len(benchmarks) > 1 else ""
        out.append((f"{prefix}all", mine))
        out += [(f"{prefix}{k}", [r for r in mine if r["kind"] == k]) for k in kinds] if len(kinds) > 1 else []
    return out


def eval_score(report: dict[str, Any], records: Sequence[dict[str, Any]], path: Path) -> Path:
    """The share of tasks passed per benchmark and hole kind, with each group's task count."""
    groups = _groups(records)
    fig, (ax,) = _figure(max(5.0, 1.3 * len(groups) + 2), 4.2)
    scores = [100 * sum(bool(r["passed"]) for r in rs) / max(1, len(rs)) for _, rs in groups]
    xs = range(len(groups))
    ax.bar(xs, scores, 0.6, color=["tab:blue" if label.endswith("all") else "tab:cyan" for label, _ in groups])
    for x, s, (_, rs) in zip(xs, scores, groups, strict=True):
        ax.annotate(f"{s:.1f}%\nn={len(rs)}", (x, s), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), [label for label, _ in groups], fontsize=8)
    ax.set_ylim(0, min(118.0, max([*scores, 5.0]) * 1.3))
    metric = str(report.get("metric") or ("pass_at_1" if "pass_at_1" in report else "exact_match"))
    ax.set_ylabel(f"{metric} (%)")
    ax.set_title(_eval_title(report, "score by hole kind"))
    return _save(fig, path)


def eval_latency(report: dict[str, Any], records: Sequence[dict[str, Any]], path: Path) -> Path:
    """Each task's fill time (the engine's ms) as a box per benchmark and hole kind."""
    groups = _groups(records)
    fig, (ax,) = _figure(max(5.0, 1.3 * len(groups) + 2), 4.2)
    ax.boxplot([[float(r["elapsed_ms"]) for r in rs] or [0.0] for _, rs in groups], patch_artist=True,
               boxprops={"facecolor": "tab:cyan", "alpha": 0.6}, medianprops={"color": "black"})
    ax.set_xticks(range(1, len(groups) + 1), [label for label, _ in groups], fontsize=8)
    ax.set_ylabel("ms per task (fill)")
    ax.set_title(_eval_title(report, "fill time by hole kind"))
    return _save(fig, path)


def _eval_title(report: dict[str, Any], what: str) -> str:
    name = str(report.get("benchmark") or "eval")
    fill = report.get("fill")
    return f"{name}: {what}" + (f" ({fill} fills)" if fill else "")


def eval_plots(report: dict[str, Any], records: Sequence[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """``eval_score.png`` and ``eval_latency.png`` in ``out_dir``. ``records``: one per task, with
    ``benchmark``, ``kind`` (``hole_kind``), ``passed`` and ``elapsed_ms``."""
    d = Path(out_dir)
    return [eval_score(report, records, d / "eval_score.png"), eval_latency(report, records, d / "eval_latency.png")]
