"""The library API: Engine.load / infill / stream / complete / stream_complete, and edit_engine.infill."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edit_engine
from edit_engine import Engine
from edit_engine.model.checkpoint import CheckpointError

PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\n\nprint(add(1, 2))\n"


def test_infill_result_fields(tiny_engine: Engine) -> None:
    r = tiny_engine.infill(PREFIX, SUFFIX, language="python", max_tokens=16)
    assert isinstance(r.text, str)
    assert r.passes >= 1 and r.nfe >= 1 and r.elapsed_ms > 0
    assert r.stop_reason in ("complete", "length", "line")
    assert {"tokenize", "context", "denoise", "total"} <= set(r.timings)


def test_stream_last_pass_equals_infill(tiny_engine: Engine) -> None:
    passes = list(tiny_engine.stream(PREFIX, SUFFIX, max_tokens=16, seed=1))
    r = tiny_engine.infill(PREFIX, SUFFIX, max_tokens=16, seed=1)
    assert passes[-1].final and not any(p.final for p in passes[:-1])
    assert passes[-1].text == r.text
    assert len(passes) == r.passes and passes[-1].nfe == r.nfe
    assert [p.index for p in passes] == list(range(len(passes)))
    masked = [p.masked for p in passes]
    assert masked == sorted(masked, reverse=True) and masked[-1] == 0


def test_closing_the_stream_stops_work(tiny_engine: Engine) -> None:
    calls = []
    orig = tiny_engine.model.canvas_hidden

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return orig(*a, **k)

    tiny_engine.model.canvas_hidden = counting  # type: ignore[method-assign]
    try:
        g = tiny_engine.stream(PREFIX, SUFFIX, max_tokens=64, threshold=2.0)
        next(g)
        next(g)
        g.close()
        assert len(calls) == 2
    finally:
        del tiny_engine.model.canvas_hidden


def test_should_stop_stops_before_next_pass(tiny_engine: Engine) -> None:
    n = 0

    def stop() -> bool:
        return n >= 3

    for _ in tiny_engine.stream(PREFIX, SUFFIX, max_tokens=64, threshold=2.0, should_stop=stop):
        n += 1
    assert n == 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.text(alphabet=st.sampled_from(list("ab (x):\n\t😀é中")), max_size=60), data=st.data())
def test_complete_edit_stays_in_document(tiny_engine: Engine, doc: str, data: st.DataObject) -> None:
    off = data.draw(st.integers(0, len(doc)))
    c = tiny_engine.complete(doc, off, max_tokens=8)
    assert 0 <= c.start <= off <= c.end <= len(doc) or (c.start <= c.end and c.kind == "selection")
    new = doc[: c.start] + c.text + doc[c.end :]
    assert new.startswith(doc[: c.start]) and new.endswith(doc[c.end :])


def test_complete_selection_replaces_exactly_it(tiny_engine: Engine) -> None:
    doc = "x = 1\ny = 2\nz = 3\n"
    c = tiny_engine.complete(doc, 6, selection=(6, 11), max_tokens=8)
    assert (c.start, c.end) == (6, 11)


def test_bad_inputs(tiny_engine: Engine) -> None:
    with pytest.raises(ValueError):
        tiny_engine.complete("abc", 10)
    with pytest.raises(ValueError):
        tiny_engine.infill("a", "b", max_tokens=0)
    with pytest.raises(ValueError):
        tiny_engine.infill("a", "b", threshold=-1.0)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a directory"):
        Engine.load(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="lacks"):
        Engine.load(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(CheckpointError, match="cannot read"):
        Engine.load(tmp_path)


def test_checkpoint_round_trip(tiny_checkpoint: Path, tiny_engine: Engine) -> None:
    e = Engine.load(tiny_checkpoint)
    a = e.infill(PREFIX, SUFFIX, max_tokens=8)
    b = tiny_engine.infill(PREFIX, SUFFIX, max_tokens=8)
    assert a.text == b.text


@pytest.mark.slow
def test_packaged_model_fills_offline(packaged_engine: Engine) -> None:
    """The model inside the package loads and produces a non-empty fill for a plain Python hole."""
    r = packaged_engine.infill("import os\n\n\ndef list_files(path):\n    return ", "\n", max_tokens=32)
    assert r.tokens >= 1 and r.text, r  # min_tokens=1: a completion request never comes back empty
    assert 1 <= r.nfe <= 32 and r.stop_reason in ("complete", "length", "line")
    assert edit_engine.infill("x = [1, 2, 3]\ny = len(", ")\n", max_tokens=8).nfe >= 1


@pytest.mark.parametrize("cursor", ["    total = su", "    for name in ", "    return os.path.join(root, "])
def test_single_line_completion_stops_at_its_line(packaged_engine: Engine, cursor: str) -> None:
    """A single-line plan turns on the sampler's line stop: the same completion as denoising the whole canvas,
    in no more passes."""
    before = "import os\n\n\ndef walk(root):\n    names = os.listdir(root)\n"
    doc = before + cursor + "\n    print(names)\n"
    off = len(before + cursor)
    plan = packaged_engine.plan_document(doc, off)
    assert plan.plan.single_line and plan.cfg.line_stop
    fast = packaged_engine.complete(doc, off, repair=False)
    full = packaged_engine.complete(doc, off, repair=False, line_stop=False)
    assert fast.text == full.text
    assert fast.nfe <= full.nfe


@pytest.mark.parametrize("cursor", ["    total = su", "    if names:", "    "])
def test_complete_equals_the_streams_last_pass(packaged_engine: Engine, cursor: str) -> None:
    """``complete`` skips post-processing the passes nobody sees; its edit is still the stream's last one."""
    before = "import os\n\n\ndef walk(root):\n    names = os.listdir(root)\n"
    doc = before + cursor + "\n    print(names)\n"
    off = len(before + cursor)
    passes = list(packaged_engine.stream_complete(doc, off))
    c = packaged_engine.complete(doc, off)
    last = passes[-1]
    assert last.final
    assert (c.text, c.passes, c.nfe, c.stop_reason, c.start, c.end) == (
        last.text, last.index + 1, last.nfe, last.stop_reason, last.start, last.end)


@pytest.mark.slow
def test_compiled_pass_gives_the_same_fills(tiny_model, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """``Engine.compile`` (opt-in, serve --compile 1, bench --compile): the same fills as the eager pass."""
    import copy

    eager = Engine(tiny_model, tiny_tokenizer)
    compiled = Engine(copy.deepcopy(tiny_model), tiny_tokenizer)
    assert compiled.compile() > 0
    assert "canvas_hidden" in vars(compiled.model) and "canvas_hidden" not in vars(eager.model)
    docs = ["def f(x):\n    return x + ", "import os\n\nfor name in os.listdir('.'):\n    ", "x = [1, 2, "]
    for d in docs:
        for n in (8, 16, 24):  # canvas sizes and context lengths change without a recompile
            a = eager.infill(d, "\n", max_tokens=n)
            b = compiled.infill(d, "\n", max_tokens=n)
            assert (a.text, a.nfe) == (b.text, b.nfe)


def test_a_ceiling_below_the_checkpoint_floor_lowers_the_floor(tiny_model, tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from edit_engine.decoding.sampler import SamplerConfig

    e = Engine(tiny_model, tiny_tokenizer, SamplerConfig(min_commit=4))
    r = e.infill("def f(x):\n    return ", "\n", max_tokens=8, threshold=2.0, max_commit=1)
    assert r.nfe >= r.tokens  # one slot per pass: the reference sampler's recipe still works
    with pytest.raises(ValueError, match="max_commit"):
        e.infill("x = ", "\n", max_tokens=8, min_commit=4, max_commit=1)


def test_checkpoint_sampler_settings(tmp_path: Path, tiny_checkpoint: Path) -> None:
    import json
    import shutil

    from edit_engine.decoding.sampler import SamplerConfig

    packaged = Engine.load().sampler  # the packaged model's measured point (sampler.json)
    assert (packaged.min_commit, packaged.floor_ramp) == (8, 1)
    d = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, d)
    assert Engine.load(d).sampler == SamplerConfig()
    (d / "sampler.json").write_text(json.dumps({"_why": "a note", "min_commit": 2, "threshold": 0.8}))
    assert Engine.load(d).sampler == SamplerConfig(min_commit=2, threshold=0.8)
    (d / "sampler.json").write_text(json.dumps({"min_comit": 2}))
    with pytest.raises(CheckpointError, match="unknown sampler settings"):
        Engine.load(d)
    for bad in ("{not json", "[4]", json.dumps({"min_commit": 0}), json.dumps({"min_commit": "4"})):
        (d / "sampler.json").write_text(bad)
        with pytest.raises(CheckpointError, match="sampler.json"):
            Engine.load(d)


# ---------------------------------------------------------------------------------------------------- previews
def test_pass_previews_show_undecided_slots_where_they_sit(packaged_engine: Engine) -> None:
    """Every non-final pass with masked slots in its canvas carries a preview with a placeholder per slot;
    the final pass has none (its text is the answer)."""
    from edit_engine.engine import PLACEHOLDER

    passes = list(packaged_engine.stream("def mean(xs):\n    total = sum(xs)\n    return ", "\n\nprint(mean([1]))\n"))
    assert passes[-1].final and passes[-1].preview == ""
    early = [p for p in passes if not p.final]
    assert early and all(PLACEHOLDER in p.preview for p in early)


def test_decode_preview_places_one_placeholder_per_masked_slot(packaged_engine: Engine) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from edit_engine.engine import PLACEHOLDER, decode_preview

    tok = packaged_engine.tokenizer
    ascii_ids = [i for i in range(3, 2000) if tok.decode([i]).isascii() and tok.decode([i])]

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from(ascii_ids) | st.just(tok.mask_id), max_size=24))
    def check(ids: list[int]) -> None:
        preview = decode_preview(tok, ids)
        kept = [i for i in ids if i != tok.mask_id]
        if tok.mask_id not in ids:
            assert preview == ""
        else:
            assert preview.count(PLACEHOLDER) == ids.count(tok.mask_id)
            assert preview.replace(PLACEHOLDER, "") == tok.decode(kept)

    check()
