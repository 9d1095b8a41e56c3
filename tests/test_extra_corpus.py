"""The extra corpus (``edit-engine train --extra-corpus DIR --extra-share F``): its files take exactly F of the
sampling weight, it is never validated on, the run records it; ``edit_engine.eval.contamination`` flags a corpus
file that shares a long run of words with a benchmark program; ``benchmarks/algorithm_corpus.sh`` builds it."""

from __future__ import annotations

import gzip
import inspect
import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.cli.main import main
from edit_engine.eval import contamination
from edit_engine.train import corpus


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


def test_algorithm_corpus_refuses_an_unknown_set_before_installing(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "algorithm_corpus.sh"
    out = tmp_path / "corpus"
    r = subprocess.run(["bash", str(script), str(out), "v9"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "SET must be v1, v2, v3 or heldout" in r.stderr
    assert not out.exists()  # nothing installed, nothing created
