"""The fill path with static analysis on (``Engine.load(analysis=True)``): names jedi knows at the cursor are
spared by the novel-name penalty, its time is reported, and with analysis off (the default) nothing changes."""

from __future__ import annotations

from edit_engine import Engine

DOC = "import collections\n\n\ndef count(words):\n    c = collections.\n"


def spared(engine: Engine, word: str) -> bool:
    dp = engine.plan_document(DOC, DOC.index("collections.\n") + len("collections."))
    assert dp.bias is not None
    ids = engine.tokenizer.encode(" " + word)
    return float(dp.bias[ids[0]]) == 0.0


def test_names_the_analyser_knows_are_not_penalised(packaged_engine: Engine) -> None:
    """``Counter`` appears nowhere in the document: penalised as novel without analysis, spared with it (jedi
    lists it among ``collections``' attributes)."""
    assert not spared(packaged_engine, "Counter")
    rt = packaged_engine.rt
    with_analysis = Engine(rt.model, rt.tokenizer, rt.sampler, rt.path, rt.record, analysis=True,
                           analysis_ms=20_000)
    assert spared(with_analysis, "Counter")
    c = with_analysis.complete(DOC, DOC.index("collections.\n") + len("collections."))
    assert "analysis" in c.timings


def test_analysis_is_off_by_default(packaged_engine: Engine) -> None:
    c = packaged_engine.complete(DOC, DOC.index("collections.\n") + len("collections."))
    assert "analysis" not in c.timings
