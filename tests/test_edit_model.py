"""The edit model: its prompt, its examples (real and synthetic), its training flags, and how next edits use it."""

from __future__ import annotations

import difflib
import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.edits import edit_prompt
from edit_engine.engine import Engine
from edit_engine.model import checkpoint
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.train import edits
from edit_engine.train.data import Example
from edit_engine.train.loop import TrainConfig

SOURCE = '''\
import os


def load(path, mode):
    handle = open(path, mode)
    data = handle.read()
    size = len(data)
    handle.close()
    print(path, size)
    return data, size


def main():
    first = load("a.txt", "r")
    second = load("b.txt", "r")
    third = load("c.txt", "rb")
    return first, second, third
'''


def test_prompt_keeps_the_newest_changes_and_the_row_within_budget(tiny_tokenizer: Tokenizer) -> None:
    changes = [((f"    value_{k} = compute({k})",), (f"    value_{k} = compute({k}, cache=True)",))
               for k in range(40)]
    above = "def f():\n" + "".join(f"    x{k} = {k}\n" for k in range(200)) + "    "
    p_ids, s_ids = edit_prompt.prompt_ids(tiny_tokenizer, changes, "total = compute(99)", above, "\nreturn x\n",
                                          max_prefix=200, max_suffix=20)
    text = tiny_tokenizer.decode(p_ids)
    assert len(p_ids) <= 200 and len(s_ids) <= 20
    assert text.startswith(edit_prompt.EDITS)
    assert "compute(39, cache=True)" in text and "compute(0, cache=True)" not in text  # newest kept, oldest cut
    assert edit_prompt.NEXT + "-total = compute(99)\n" + edit_prompt.FILE in text
    block = text[: text.index(edit_prompt.FILE) + len(edit_prompt.FILE)]
    assert len(tiny_tokenizer.encode(block)) <= edit_prompt.HISTORY_TOKENS + 8
    assert text.endswith("    x199 = 199\n    ")  # the file above the row ends the prefix
    assert tiny_tokenizer.decode(s_ids) == "\nreturn x\n"


def test_synthetic_cases_repeat_one_change_at_the_next_site() -> None:
    rng = random.Random(3)
    cases = []
    for _ in range(30):
        cases += edits.synthetic_cases(SOURCE, rng, edits._parser(), per_file=3)
    assert {c.source for c in cases} >= {"rename", "call"}
    for c in cases:
        lines = c.document.split("\n")
        old = lines[c.row]
        assert c.new != old and c.changes
        for removed, added in c.changes:  # each shown change is applied in the document
            assert added[0] in lines and removed[0] in SOURCE.split("\n")
        # the target is the same kind of change: the rewritten row differs from the original in the same words
        diff = difflib.SequenceMatcher(None, old, c.new).get_opcodes()
        assert any(tag != "equal" for tag, *_ in diff)
    sig = [c for c in cases if c.source == "signature"]
    for c in sig:
        assert any("def load(path, mode, " in a[0] or "load(" in a[0] for _, a in c.changes)


def test_examples_from_a_case_and_a_row_kept(tiny_tokenizer: Tokenizer) -> None:
    lines = SOURCE.split("\n")
    row = lines.index('    second = load("b.txt", "r")')
    case = edits.EditCase(SOURCE, (((lines[row - 1],), (lines[row - 1].replace("load(", "read(")),),), row,
                          lines[row].replace("load(", "read("), "call")
    ex = edits.example(tiny_tokenizer, case, 256, 96)
    assert ex is not None and ex.kind == "call"
    assert tiny_tokenizer.decode(ex.hole) == 'second = read("b.txt", "r")'
    assert tiny_tokenizer.decode(ex.prefix).endswith("first = load(\"a.txt\", \"r\")\n    ")
    assert tiny_tokenizer.decode(ex.suffix).startswith('\n    third = load(')
    kept = edits.example(tiny_tokenizer, case, 256, 96, keep_row=row + 1)
    assert kept is not None and tiny_tokenizer.decode(kept.hole) == 'third = load("c.txt", "rb")'
    assert lines[row - 3] == "" and edits.example(tiny_tokenizer, case, 256, 96, keep_row=row - 3) is None


def test_real_cases_read_the_target_and_the_history(tmp_path: Path) -> None:
    before = SOURCE.split("\n")
    mid = list(before)
    mid[13] = mid[13].replace("load(", "read(")
    after = list(mid)
    after[14] = after[14].replace("load(", "read(")

    def udiff(a: list[str], b: list[str]) -> str:
        return "".join(difflib.unified_diff([x + "\n" for x in a], [x + "\n" for x in b], "a/x.py", "b/x.py"))

    case = {"document": "\n".join(mid), "history": [udiff(before, mid)], "target_diff": udiff(mid, after)}
    path = tmp_path / "cases.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps(case) + "\n" + json.dumps({**case, "target_diff": "not a diff"}) + "\n")
    got = list(edits.real_cases(path))
    assert len(got) == 1
    c = got[0]
    assert c.row == 14 and c.new == after[14] and c.changes == (((before[13],), (mid[13],)),)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 8191), max_size=30), st.lists(st.integers(0, 8191), min_size=1,
                                                                                   max_size=20),
                          st.lists(st.integers(0, 8191), max_size=30), st.sampled_from(["real", "keep", "call"])),
                min_size=1, max_size=12))
def test_examples_survive_save_and_load(tmp_path_factory: pytest.TempPathFactory,
                                        rows: list[tuple[list[int], list[int], list[int], str]]) -> None:
    exs = [Example(p, h, s, k) for p, h, s, k in rows]
    d = tmp_path_factory.mktemp("ex")
    edits.save(exs, d)
    assert edits.load(d) == exs
    train, val = edits.split(exs, val_share=0.5)
    assert sorted(map(repr, train + val)) == sorted(map(repr, exs))


def test_edit_flags_are_checked_in_one_place() -> None:
    with pytest.raises(ValueError, match="go together"):
        TrainConfig(out="x", edits=("d",))
    with pytest.raises(ValueError, match="go together"):
        TrainConfig(out="x", edit_share=0.5)
    with pytest.raises(ValueError, match="0 to 1"):
        TrainConfig(out="x", edits=("d",), edit_share=1.5)
    with pytest.raises(ValueError, match="one positive weight"):
        TrainConfig(out="x", edits=("d", "e"), edit_share=1.0, edit_weights=(1.0,))
    with pytest.raises(ValueError, match="diffusion objective"):
        TrainConfig(out="x", edits=("d",), edit_share=1.0, objective="ar")
    TrainConfig(out="x", edits=("d", "e"), edit_share=0.5, edit_weights=(3.0, 1.0))


def test_next_edit_writes_with_the_edit_model_and_its_prompt(
        tmp_path: Path, tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer,
        save_tiny_checkpoint: Callable[[str, DiffusionLM, str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    edit_dir = tmp_path / "edit"
    checkpoint.save(edit_dir, tiny_model, tiny_tokenizer, {"task": "edit"}, dtype=torch.float32)
    fill_dir = save_tiny_checkpoint("fill", tiny_model, "fill model")
    seen: list[str] = []
    real = edit_prompt.prompt_ids

    def spy(tok, changes, old, above, below, mp, ms):  # type: ignore[no-untyped-def]
        seen.append(old)
        return real(tok, changes, old, above, below, mp, ms)

    monkeypatch.setattr(edit_prompt, "prompt_ids", spy)
    lines = SOURCE.split("\n")
    before = "\n".join(lines)
    lines[8] = '    print("loaded", path, size)'  # no pattern reaches another row: the model's turn
    doc = "\n".join(lines)
    hist = ["".join(difflib.unified_diff(before.splitlines(True), doc.splitlines(True), "a/x.py", "b/x.py"))]
    cursor = doc.index("size)") + len("size)")
    engine = Engine.load(fill_dir, edit_model=edit_dir)
    assert engine.edits.path == edit_dir
    engine.next_edit(doc, cursor, hist, use_model=True)
    assert engine.edits.runtime(engine.rt, True).record["task"] == "edit" and seen  # the edit model wrote, from its prompt
    n = len(seen)
    engine.next_edit(doc, cursor, hist, use_model=False)  # patterns only: no model, no prompt
    assert len(seen) == n
    plain = Engine.load(fill_dir, edit_model=False)
    assert plain.edits.path is None and plain.edits.runtime(plain.rt, True) is plain.rt
    plain.next_edit(doc, cursor, hist)
    assert len(seen) == n  # the fill model rewrites from the document, not the edit prompt
    assert Engine.load(fill_dir).edits.path is None  # a checkpoint of one's own: no packaged edit model beside it
