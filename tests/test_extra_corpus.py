"""The extra corpus (``edit-engine train --extra-corpus DIR --extra-share F``): its files take exactly F of the
sampling weight, it is never validated on, the run records it; and ``scripts/contamination.py`` flags a corpus
file that shares a long run of words with a benchmark program."""

from __future__ import annotations

import gzip
import inspect
import json
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.cli import main
from edit_engine.train import corpus

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import candidate_table  # noqa: E402
import contamination  # noqa: E402


def _file(name: str, size: int, group: str, extra: bool) -> corpus.CorpusFile:
    return corpus.CorpusFile(Path(name), name, size, group, extra)


@settings(max_examples=60, deadline=None)
@given(base=st.lists(st.tuples(st.integers(200, 300_000), st.sampled_from("abcd")), min_size=1, max_size=12),
       extra=st.lists(st.integers(200, 300_000), min_size=0, max_size=6),
       share=st.one_of(st.just(0.0), st.floats(corpus.MIN_EXTRA_SHARE, 0.95)))
def test_mixed_weights_give_the_extra_files_their_share(base: list[tuple[int, str]], extra: list[int],
                                                         share: float) -> None:
    files = [_file(f"b{i}.py", s, g, False) for i, (s, g) in enumerate(base)]
    files += [_file(f"e{i}.py", s, "x", True) for i, s in enumerate(extra)]
    w = corpus.mixed_weights(files, share)
    assert len(w) == len(files) and all(x >= 0 for x in w)
    base_w = corpus.sampling_weights([f for f in files if not f.extra])
    got_extra = sum(x for x, f in zip(w, files, strict=True) if f.extra) / sum(w)
    if share > 0 and extra:
        assert got_extra == pytest.approx(share, rel=1e-9, abs=1e-12)
        # Within each part the weights keep their proportions: the ordinary files as sampling_weights,
        # the extra files by size.
        b = [x for x, f in zip(w, files, strict=True) if not f.extra]
        assert [x / sum(b) for x in b] == pytest.approx([x / sum(base_w) for x in base_w])
        e = [x for x, f in zip(w, files, strict=True) if f.extra]
        assert [x / sum(e) for x in e] == pytest.approx([s / sum(extra) for s in extra])
    else:  # no share: the ordinary weights exactly, extra files never drawn
        assert got_extra == 0.0
        assert [x for x, f in zip(w, files, strict=True) if not f.extra] == base_w


@pytest.mark.slow
def test_extra_corpus_is_trained_at_its_share_and_never_validated(
        tmp_path: Path, tiny_train_argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    names = [f"algo{k}.py" for k in range(200)]
    val = [n for n in names if corpus.CorpusFile(Path(n), n, 0, "").split == "val"][:1]
    train = [n for n in names if n not in val][:2]
    for n in val + train:
        (extra / n).write_text(inspect.getsource(textwrap)[:8000])
    reads: list[tuple[bool, str]] = []
    real = corpus.read_text

    def spy(f: corpus.CorpusFile) -> str | None:
        reads.append((f.extra, f.split))
        return real(f)

    monkeypatch.setattr(corpus, "read_text", spy)
    # Validation reads first (8 fixed batches), then training; a file gives several examples per read.
    assert main([*tiny_train_argv, "--steps", "30", "--extra-corpus", str(extra), "--extra-share", "0.6"]) == 0
    assert all(split == "train" for is_extra, split in reads if is_extra), "an extra validation file was read"
    rec = json.loads((tmp_path / "run" / "checkpoint" / "training.json").read_text())
    assert rec["extra_corpus"]["share"] == 0.6 and rec["extra_corpus"]["files"] == 3
    assert rec["extra_corpus"]["train_files"] == 2
    assert rec["corpus"]["val_files"] == 1  # the ordinary corpus's one validation file, as without the extra
    extra_reads = sum(is_extra for is_extra, _ in reads)
    assert extra_reads > 0
    monkeypatch.setattr(corpus, "read_text", real)
    for bad in (["--extra-share", "0.2"], ["--extra-share", "1.0", "--extra-corpus", str(extra)],
                ["--extra-share", "-0.1", "--extra-corpus", str(extra)],
                ["--extra-share", "5e-324", "--extra-corpus", str(extra)]):  # would underflow: never drawn
        assert main(["train", "--out", str(tmp_path / "bad"), "--steps", "1", *bad]) == 2
    assert not (tmp_path / "bad").exists()


def _gz(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_contamination_flags_a_copied_program_and_not_an_idiom(tmp_path: Path) -> None:
    prompt = 'def count_vowels_weighted(s):\n    """Count the vowels of s, counting y at the end as a vowel."""\n'
    body = "    total = sum(c in 'aeiou' for c in s.lower())\n"
    suffix = "    if s and s[-1] in 'yY':\n        total += 1\n    return total\n"
    he = {"task_id": "HumanEval/0/L0", "entry_point": "count_vowels_weighted", "prompt": prompt,
          "suffix": suffix, "canonical_solution": body, "test": "def check(c):\n    pass\n"}
    data = tmp_path / "bench"
    _gz(data / "human-eval-infilling" / "HumanEval-SingleLineInfilling.jsonl.gz", [he])
    _gz(data / "human-eval-infilling" / "HumanEval-MultiLineInfilling.jsonl.gz", [he])
    _gz(data / "santacoder-fim" / "benchmark.jsonl.gz",
        [{"name": "x", "language": "py", "prompt": "x = 1", "suffix": "", "canonical_solution": "y = 2",
          "tests": ""}])
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "copied.py").write_text("# a file that embeds the benchmark program\n" + prompt + body + suffix)
    (root / "idiom.py").write_text("def f(xs):\n    for i in range(len(xs)):\n        print(xs[i])\n" * 3)
    hits = contamination.flagged([root], 13, str(data))
    assert [Path(str(h["file"])).name for h in hits] == ["copied.py"]
    assert contamination.main([str(root), "--data", str(data)]) == 1
    (root / "copied.py").unlink()
    assert contamination.main([str(root), "--data", str(data)]) == 0


def test_candidate_table_reads_each_measure_and_marks_missing_ones(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / "packaged", tmp_path / "cand"
    for d, ce, p in ((a, 2.5, 0.01), (b, 2.3, 0.02)):
        d.mkdir()
        (d / "context_gap.json").write_text(json.dumps({"val_masked_ce": ce, "context_gap": 0.6}) + "\n")
        (d / "humaneval-single-bare.json").write_text("progress\n" + json.dumps({"pass_at_1": p, "edit_sim": 0.3}))
    (b / "heldout_lines_document.json").write_text(json.dumps({"rows": [{"exact_match": 0.05}]}, indent=2))
    assert candidate_table.main([str(a), str(b), "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "| held-out masked CE (512) | 2.500 | 2.300 |" in out
    assert "| HumanEval single-line, bare: pass@1 | 1.00% | 2.00% |" in out
    assert "| held-out lines, editor's path: exact match | - | 5.0% |" in out
    figs = json.loads((tmp_path / "t.json").read_text())
    assert figs["HumanEval single-line, bare: edit similarity"] == {"packaged": 0.3, "cand": 0.3}


def test_algorithm_corpus_refuses_an_unknown_set_before_installing(tmp_path: Path) -> None:
    import subprocess

    script = Path(__file__).resolve().parents[1] / "scripts" / "algorithm_corpus.sh"
    out = tmp_path / "corpus"
    r = subprocess.run(["bash", str(script), str(out), "v9"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "SET must be v1, v2, v3 or heldout" in r.stderr
    assert not out.exists()  # nothing installed, nothing created


def test_candidate_table_warns_when_the_columns_ran_at_different_samplers(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / "packaged", tmp_path / "cand"
    for d, floor in ((a, 6), (b, 1)):
        d.mkdir()
        rec = {"pass_at_1": 0.01, "sampler": {"min_commit": floor, "spread": 1 if floor > 1 else 0}}
        (d / "santacoder-fim-bare.json").write_text(json.dumps(rec))
        (d / "humaneval-single-bare.json").write_text(json.dumps({**rec, "sampler": {"min_commit": 6}}))
    assert candidate_table.main([str(a), str(b)]) == 0
    warnings = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("WARNING")]
    assert len(warnings) == 1 and "santacoder-fim-bare.json" in warnings[0] and '"min_commit": 1' in warnings[0]


def test_candidate_eval_refuses_a_checkpoint_without_a_sampler_point(tmp_path: Path) -> None:
    import subprocess

    script = Path(__file__).resolve().parents[1] / "scripts" / "candidate_eval.sh"
    (tmp_path / "ckpt").mkdir()
    r = subprocess.run(["bash", str(script), str(tmp_path / "ckpt"), str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "no sampler.json" in r.stderr
    assert not (tmp_path / "out").exists()


def test_candidate_table_pairs_edit_similarity_over_the_same_holes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / "packaged", tmp_path / "cand"
    a.mkdir()
    b.mkdir()
    # JSONL pairs by task_id: task "c" is only in the candidate and must not count
    (a / "humaneval-single-bare.jsonl").write_text(
        "".join(json.dumps({"task_id": t, "edit_sim": v}) + "\n" for t, v in (("x", 0.2), ("y", 0.5))))
    (b / "humaneval-single-bare.jsonl").write_text(
        "".join(json.dumps({"task_id": t, "edit_sim": v}) + "\n" for t, v in (("y", 0.7), ("x", 0.1), ("c", 1.0))))
    # a sweep pairs by position
    for d, sims in ((a, [0.1, 0.2, 0.3]), (b, [0.3, 0.4, 0.5])):
        (d / "heldout_functions.json").write_text(json.dumps({"rows": [{"edit_sim": sum(sims) / 3,
                                                                         "edit_sims": sims}]}))
    assert candidate_table.main([str(a), str(b), "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "heldout_functions.json: cand - packaged = +20.0 (SE 0.0; closer on 3, farther on 0, of 3)" in out
    # x: -0.1, y: +0.2 -> mean +0.05, SE = sd / sqrt(2) = 0.2121 / 1.414 = 0.15
    assert "humaneval-single-bare.jsonl: cand - packaged = +5.0 (SE 15.0; closer on 1, farther on 1, of 2)" in out
    figs = json.loads((tmp_path / "t.json").read_text())
    assert figs["paired_edit_similarity"]["humaneval-single-bare.jsonl"]["cand"]["n"] == 2
    assert figs["held-out functions (HELDOUT), bare: edit similarity"]["cand"] == pytest.approx(0.4)


def test_function_holes_from_an_untrained_root_are_distinct_and_humaneval_shaped(tmp_path: Path) -> None:
    import sweep_commit

    root = tmp_path / "pkg"
    root.mkdir()
    body = "".join(f"def f{i}(xs):\n    \"\"\"Doc {i}.\"\"\"\n    total = 0\n    for x in xs:\n"
                   f"        total += x * {i}\n    return total\n\n\n" for i in range(3))
    (root / "mod.py").write_text(body)
    # 3 functions x 4 body lines: asking for more gives every cut once, not repeats
    cuts = sweep_commit.function_holes(50, roots=[str(root)], all_files=True)
    assert len(cuts) == 12 == len({(pre, line) for pre, _, line, _, _ in cuts})
    for pre, suf, line, _, _ in cuts:
        assert pre.startswith("def f") and '"""Doc' in pre and line.endswith("\n")
        assert sweep_commit.parses(pre + line + suf)
    with pytest.raises(SystemExit):  # the validation split of one tiny root may be empty: said, not a hang
        sweep_commit.held_out_files([str(tmp_path / "none")], all_files=True)
    with pytest.raises(SystemExit):
        sweep_commit.main(["--all-files", "--holes", "functions"])  # --all-files needs --corpus
