"""Function crops for training (``data.function_crop``, ``--function-share``): one function of a file, dedented,
as a file of its own; the validation batches never see them."""

from __future__ import annotations

import ast
import random
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.tokenizer import Tokenizer
from edit_engine.train import corpus, loop
from edit_engine.train.data import function_crop

SOURCE = '''\
"""A module.
from here on, prose: not an import
"""
import os
from typing import (
    List,
)

CONSTANT = 3


class Box:
    def area(self, w: int, h: int) -> int:
        """Area of a w by h box."""
        total = w * h
        return total

    def label(self):
        return f"box {self!r}"


def mean(xs: List[float]) -> float:
    """The mean of xs, or 0.0 for none."""
    if not xs:
        return 0.0
    return sum(xs) / len(xs)
'''


def test_a_crop_is_one_dedented_function_that_parses() -> None:
    seen = set()
    with_imports = 0
    for seed in range(60):
        crop = function_crop(SOURCE, random.Random(seed), min_lines=3)
        assert crop is not None
        ast.parse(crop)
        body = crop.split("\n\n\n")[-1]  # after the imports, when they were put first
        assert body.startswith("def ")
        assert textwrap.indent(body, "    ") in SOURCE or body in SOURCE  # a method, or a top-level function
        assert "class Box" not in crop and "CONSTANT" not in crop  # nothing else of the file
        if crop != body:
            # the module's import statements, the multi-line one whole; never the docstring's "from" line
            assert crop.startswith("import os\nfrom typing import (\n    List,\n)\n")
            assert "prose" not in crop
            with_imports += 1
        seen.add(body.split("(")[0])
    # `label` has 2 lines, under min_lines; the other two are drawn.
    assert seen == {"def area", "def mean"}
    assert 10 < with_imports < 50  # about half the crops, at imports=0.5


def test_no_function_no_crop() -> None:
    assert function_crop("x = 1\ny = 2\n", random.Random(0)) is None
    assert function_crop(SOURCE, random.Random(0), min_lines=30) is None  # none is that long
    # A body line left of its def (a multi-line string) cannot be dedented: no crop rather than a broken one.
    odd = 'class A:\n    def f(self):\n        s = """\nleft\n"""\n        return s\n'
    assert function_crop(odd, random.Random(0), min_lines=2) is None


_name = st.sampled_from(["a", "b", "xs", "é", "中文", "n_1"])


@settings(max_examples=100, deadline=None)
@given(names=st.lists(_name, min_size=1, max_size=4), depth=st.integers(0, 2), seed=st.integers(0, 2**32 - 1))
def test_crops_of_generated_code_parse(names: list[str], depth: int, seed: int) -> None:
    lines = [f"def f{i}({n}):\n    '''doc {n} 😀'''\n    {n} = {i}\n    return {n}\n" for i, n in enumerate(names)]
    src = "\n".join(lines)
    for d in range(depth):
        src = f"class C{d}:\n" + textwrap.indent(src, "    ")
    crop = function_crop(src, random.Random(seed))
    assert crop is not None
    ast.parse(crop)
    assert crop.startswith("def f") and crop.count("def ") == 1


def test_function_share_is_a_share() -> None:
    with pytest.raises(ValueError, match="function_share"):
        loop.TrainConfig(out="x", function_share=1.5)
    with pytest.raises(ValueError, match="function_share"):
        loop.TrainConfig(out="x", function_share=-0.1)


def test_a_stream_at_share_one_draws_only_inside_functions(tmp_path: Path, tiny_tokenizer: Tokenizer) -> None:
    (tmp_path / "m.py").write_text(SOURCE)
    files = corpus.list_files([tmp_path])
    cfg = loop.TrainConfig(out=str(tmp_path / "o"))
    crops = loop.ExampleStream(files, tiny_tokenizer, cfg, seed=0, function_share=1.0)
    plain = loop.ExampleStream(files, tiny_tokenizer, cfg, seed=0)  # validation's: no share given
    crop_text = [tiny_tokenizer.decode(e.prefix + e.hole + e.suffix) for e in (crops.next() for _ in range(40))]
    plain_text = [tiny_tokenizer.decode(e.prefix + e.hole + e.suffix) for e in (plain.next() for _ in range(40))]
    assert not any("CONSTANT" in t or "class Box" in t for t in crop_text)
    assert any("CONSTANT" in t or "class Box" in t for t in plain_text)
