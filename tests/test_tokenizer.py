from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine.model.tokenizer import MASK, Tokenizer


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_round_trip_any_unicode(tiny_tokenizer: Tokenizer, s: str) -> None:
    assert tiny_tokenizer.decode(tiny_tokenizer.encode(s)) == s


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("def (x):\n\t ret<|mask|>pad🎉é\u0301中")), max_size=60))
def test_round_trip_code_like(tiny_tokenizer: Tokenizer, s: str) -> None:
    assert tiny_tokenizer.decode(tiny_tokenizer.encode(s)) == s


def test_literal_special_token_text_is_not_a_control_token(tiny_tokenizer: Tokenizer) -> None:
    ids = tiny_tokenizer.encode(f"x = '{MASK}'")
    assert tiny_tokenizer.mask_id not in ids
    assert tiny_tokenizer.pad_id not in ids
    assert tiny_tokenizer.decode(ids) == f"x = '{MASK}'"


def test_decode_drops_pad_and_mask(tiny_tokenizer: Tokenizer) -> None:
    t = tiny_tokenizer
    ids = t.encode("return x")
    assert t.decode([t.mask_id, *ids, t.pad_id, t.pad_id]) == "return x"


def test_special_ids_fixed(tiny_tokenizer: Tokenizer) -> None:
    assert (tiny_tokenizer.pad_id, tiny_tokenizer.mask_id, tiny_tokenizer.eos_id) == (0, 1, 2)


def test_save_load(tmp_path, tiny_tokenizer: Tokenizer) -> None:
    tiny_tokenizer.save(tmp_path / "t.json")
    t2 = Tokenizer.from_file(tmp_path / "t.json")
    s = "async def f():\n    await g()  # ✓\n"
    assert t2.encode(s) == tiny_tokenizer.encode(s)
    assert t2.decode(t2.encode(MASK)) == MASK


def test_the_packaged_tokenizers_hold_every_byte() -> None:
    """A byte-level vocabulary needs one token per byte: text with any character round-trips."""
    from edit_engine.model import checkpoint

    for folder in (checkpoint.DEFAULT_DIR, checkpoint.DEFAULT_DIR.parent / "ar-baseline"):
        tok = Tokenizer.from_file(folder / "tokenizer.json")
        text = "".join(chr(c) for c in range(32, 0x250)) + " façade § ç"
        assert tok.decode(tok.encode(text)) == text, folder
