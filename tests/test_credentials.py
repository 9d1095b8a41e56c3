"""No suggestion writes what looks like a credential: a key in a file beside the document (or anywhere the
memory of code or a copy learns from) is never proposed, whoever proposes it."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.engine import Engine
from edit_engine.engine.credentials import writes_credential
from edit_engine.engine.drafts import DraftPolicy
from edit_engine.engine.gate import ShowGate
from edit_engine.memory import Memory

KEY = "sk-live-4f9QzR7uXc2WbT8e"
SECRETS = f'STRIPE_API_KEY = "{KEY}"\nOPENAI_API_KEY = "{KEY}"\n' * 6 + 'GREETING = "hello"\n' * 6


@pytest.mark.parametrize(("before", "text", "secret"), [
    ("STRIPE_API_KEY = ", f'"{KEY}"', True),
    ("OPENAI_API_KEY = ", '"sk-live-4f9', True),  # cut before its closing quote
    ("token = ", '"abc"', True),
    ("cfg = {", '"password": "hunter2"}', True),
    ("x = ", '"a3F9kQ2zL8pX7vB1nM4cR6tY"', True),
    ("h = ", '"AKIAIOSFODNN7EXAMPLE"', True),
    ("x = ", '"hello world"', False),
    ("path = ", '"/usr/local/lib/python3.11/site-packages"', False),
    ("url = ", '"https://example.com/a/b/c?x=1"', False),
    ("key = ", 'row["id"]', False),
    ("self.key = ", "key", False),
    (f'KEY = "{KEY}"; y = ', '"ok"', False),  # the key is the user's own text, before the cursor
    ("x = ", '"ThisIsAVeryLongCamelCaseIdentifierName"', False),
])
def test_what_looks_like_a_credential(before: str, text: str, secret: bool) -> None:
    assert writes_credential(before, text) is secret


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(['"', "'", "KEY = ", "a" * 7, " ", "=", ":"]), st.integers(1_000, 60_000))
def test_the_check_is_linear(piece: str, n: int) -> None:
    t0 = time.perf_counter()
    writes_credential("x = ", piece * (n // len(piece)) + '"')
    assert time.perf_counter() - t0 < 1.0


@pytest.fixture()
def memory_engine(tiny_engine: Engine) -> Engine:
    tiny_engine.rt.memory = Memory(models_dir=None)
    tiny_engine.rt.draft_policy = DraftPolicy.uniform(0.5)
    yield tiny_engine
    tiny_engine.rt.memory = None
    tiny_engine.rt.gate = ShowGate()


@pytest.mark.parametrize("name", ["STRIPE_API_KEY", "OPENAI_API_KEY"])
def test_a_key_in_a_related_file_is_never_proposed(memory_engine: Engine, name: str) -> None:
    doc = f"import os\n\n{name} = "
    for show in (0.0, None):  # an explicit request and one asked while typing
        c = memory_engine.complete(doc + "\n", len(doc), uri="file:///app.py", related=[SECRETS],
                                   show_threshold=show)
        assert KEY[:6] not in c.text, c
    # The same memory still drafts what is not a secret.
    doc2 = "import os\n\nGREETING = "
    c = memory_engine.complete(doc2 + "\n", len(doc2), uri="file:///app2.py", related=[SECRETS])
    assert c.text == '"hello"' and c.source == "memory", c


def test_a_key_in_the_workspace_tier_is_never_proposed(memory_engine: Engine) -> None:
    memory_engine.set_workspace([("settings.py", SECRETS)], "python")
    doc = "OPENAI_API_KEY = "
    assert memory_engine.rt.memory is not None
    drafted = memory_engine.rt.memory.draft(doc, "\n", "python", min_prob=0.5)
    assert drafted is not None and KEY[:6] in drafted.text  # the memory alone would write it
    c = memory_engine.complete(doc + "\n", len(doc), uri="file:///w.py")
    assert KEY[:6] not in c.text and c.source != "memory", c
