"""Every Triton kernel against its PyTorch twin, under the Triton interpreter on the CPU.

Shapes are drawn by Hypothesis from odd sizes (1, 7, 63, 500 positions; vocabularies and widths that are not
powers of two), dtypes fp32 / bf16 / fp16 with per-dtype tolerances. Every buffer a launcher allocates is
poisoned first (NaN for floats, a sentinel for integers, 0xFF for bools), so an element a kernel forgets to write
fails the comparison; comparisons never accept NaN.

Interpreter caveats (not kernel bugs): it rounds fp32 -> bf16 by truncation where the GPU rounds to nearest
even, so bf16 outputs may differ from the twin by one bf16 ulp (inside the bf16 tolerance); and its ``tl.dot``
misreads bf16 operands, so the kernels compute dots in fp32 when interpreting (``_triton_attention.f32_dot``).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported anywhere

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton); kernel tests need it")

from edit_engine import kernels  # noqa: E402
from edit_engine.kernels import CommitRule, commit_from_stats_ref  # noqa: E402
from edit_engine.kernels import _triton_attention as tattn  # noqa: E402
from edit_engine.kernels import _triton_commit as tcommit  # noqa: E402
from edit_engine.kernels import _triton_head as thead  # noqa: E402
from edit_engine.kernels import _triton_rmsnorm as trms  # noqa: E402
from edit_engine.kernels import _triton_rotary as trot  # noqa: E402
from edit_engine.kernels import head as khead  # noqa: E402
from edit_engine.kernels.commit import commit_step_ref, token_stats_ref  # noqa: E402
from edit_engine.kernels.rules import HeadBans  # noqa: E402

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("kernel tests run CPU tensors and need TRITON_INTERPRET=1", allow_module_level=True)

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# (atol, rtol) per dtype of the compared tensor: fp32 allows reordered sums, 16-bit formats one or two ulps.
TOL = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}
SCORE_TOL = 2e-5  # scores are fp32 from exactly upcast logits, whatever the logits' dtype
FEW = settings(max_examples=10, deadline=None)
POSITIONS = st.sampled_from([1, 7, 63, 500])
VOCABS = st.sampled_from([2, 5, 333, 1000, 1500])  # 1500 > one 1024-wide block: the online merge runs
_DTYPE = st.sampled_from(DTYPES)


def assert_close(name: str, actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None,
                 atol: float | None = None) -> None:
    """Compare with the tolerance of ``dtype`` (default: expected's); NaN never passes; names the tensor."""
    a_tol, r_tol = TOL[dtype or expected.dtype]
    torch.testing.assert_close(actual.float(), expected.float(), atol=a_tol if atol is None else atol,
                               rtol=r_tol, equal_nan=False, msg=lambda m: f"{name}: {m}")


@pytest.fixture(autouse=True)
def poisoned(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torch.empty returns poisoned memory while a test runs: NaN floats, -12345 integers, 0xFF bools."""
    real = torch.empty

    def empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        t = real(*args, **kwargs)
        if t.dtype == torch.bool:
            t.view(torch.uint8).fill_(0xFF)
        elif t.dtype.is_floating_point:
            t.fill_(float("nan"))
        elif t.dtype == torch.uint8:
            t.fill_(0xFF)
        else:
            t.fill_(-12345)
        return t

    monkeypatch.setattr(torch, "empty", empty)
    yield


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _logits(b: int, c: int, v: int, dtype: torch.dtype, seed: int, scale: float = 3.0) -> torch.Tensor:
    return (torch.randn(b, c, v, generator=_gen(seed)) * scale).to(dtype)


def _bools_valid(name: str, t: torch.Tensor) -> None:
    assert bool((t.view(torch.uint8) <= 1).all()), f"{name}: unwritten (poisoned) bool elements"


# ---------------------------------------------------------------------------------------------- commit step
@FEW
@given(c=POSITIONS, v=VOCABS, dtype=_DTYPE, with_choice=st.booleans(), seed=st.integers(0, 999))
def test_token_stats_match_twin(c: int, v: int, dtype: torch.dtype, with_choice: bool, seed: int) -> None:
    b = 2 if c < 500 else 1
    logits = _logits(b, c, v, dtype, seed)
    choice = torch.randint(0, v, (b, c), generator=_gen(seed + 1)) if with_choice else None
    idx, s = tcommit.token_stats_triton(logits, choice)
    idx_ref, s_ref = token_stats_ref(logits, choice)
    assert torch.equal(idx, idx_ref), "token: arg-max (lowest index among ties) differs"
    assert_close("score", s, s_ref, atol=SCORE_TOL)
    # The twin itself: the score is the softmax probability of the chosen token.
    p = torch.softmax(logits.double(), dim=-1).gather(-1, idx_ref.unsqueeze(-1)).squeeze(-1)
    assert_close("twin score against the softmax", s_ref, p.float(), atol=SCORE_TOL)


@FEW
@given(c=st.sampled_from([1, 7, 63]), v=VOCABS, seed=st.integers(0, 999))
def test_token_stats_with_banned_tokens(c: int, v: int, seed: int) -> None:
    """The sampler sets the mask id (and often the pad id) to -inf: no NaN may come out, in kernel or twin."""
    logits = _logits(1, c, v, torch.float32, seed)
    logits[..., 0] = float("-inf")
    if v > 2:
        logits[..., v - 1] = float("-inf")
    idx, s = tcommit.token_stats_triton(logits)
    idx_ref, s_ref = token_stats_ref(logits)
    assert not bool(s_ref.isnan().any()), "twin score is NaN with a banned token"
    assert torch.equal(idx, idx_ref)
    assert_close("score", s, s_ref, atol=SCORE_TOL)


@FEW
@given(c=POSITIONS, v=st.sampled_from([5, 333, 1500]), dtype=_DTYPE,
       threshold=st.sampled_from([0.0, 0.05, 0.3, 0.9, 1.5]), min_commit=st.integers(1, 3),
       max_commit=st.sampled_from([0, 3, 8]), seed=st.integers(0, 999), spread=st.sampled_from([0, 1, 2, 3]))
def test_commit_step_matches_twin(c: int, v: int, dtype: torch.dtype, threshold: float,
                                  min_commit: int, max_commit: int, seed: int, spread: int) -> None:
    """Tokens, mask, scores and the committed set equal the twin's (continuous logits: no near-ties)."""
    max_commit = max(max_commit, min_commit) if max_commit else 0
    b = 2 if c < 500 else 1
    logits = _logits(b, c, v, dtype, seed, scale=2.0)
    g = _gen(seed + 2)
    tokens = torch.randint(0, v, (b, c), generator=g)
    masked = torch.rand(b, c, generator=g) < 0.7
    t_ref, m_ref = tokens.clone(), masked.clone()
    rule = CommitRule(threshold, min_commit, max_commit, spread)
    s, commit = tcommit.commit_step_triton(logits, tokens, masked, rule)
    s_ref, commit_ref = commit_step_ref(logits, t_ref, m_ref, rule)
    _bools_valid("committed", commit)
    assert_close("score", s, s_ref, atol=SCORE_TOL)
    assert torch.equal(commit, commit_ref), "committed set differs"
    assert torch.equal(tokens, t_ref), "tokens differ"
    assert torch.equal(masked, m_ref), "mask differs"


@FEW
@given(c=POSITIONS, levels=st.integers(1, 4), threshold=st.sampled_from([0.0, 0.5, 2.0]),
       min_commit=st.integers(1, 4), max_commit=st.sampled_from([0, 4, 9]), seed=st.integers(0, 999),
       spread=st.sampled_from([0, 1, 2, 3]))
def test_commit_rule_exact_with_ties(c: int, levels: int, threshold: float, min_commit: int, max_commit: int,
                                     seed: int, spread: int) -> None:
    """The rank/commit kernel alone, on scores with many exact ties: lowest index wins, like the stable sort."""
    max_commit = max(max_commit, min_commit) if max_commit else 0
    g = _gen(seed)
    b = 3
    s = torch.randint(0, levels, (b, c), generator=g).float() / levels  # few distinct values
    idx = torch.randint(0, 50, (b, c), generator=g)
    tokens = torch.randint(0, 50, (b, c), generator=g)
    masked = torch.rand(b, c, generator=g) < 0.6
    t_ref, m_ref = tokens.clone(), masked.clone()
    before = masked.clone()
    rule = CommitRule(threshold, min_commit, max_commit, spread)
    score, commit = tcommit.commit_from_stats_triton(idx, s, tokens, masked, rule)
    score_ref, commit_ref = commit_from_stats_ref(idx, s, t_ref, m_ref, rule)
    _bools_valid("committed", commit)
    assert torch.equal(score, score_ref), "score (-1 off the mask) differs"
    assert torch.equal(commit, commit_ref), "committed set differs"
    assert torch.equal(tokens, t_ref) and torch.equal(masked, m_ref)
    # The rule itself: masks only decrease; at least min(min_commit, masked) and at most max_commit per row.
    assert not bool((masked & ~before).any())
    n = commit.sum(-1)
    least = 1 if spread else min_commit  # spread: the best masked slot always commits; the floor may take fewer
    assert bool((n >= torch.minimum(before.sum(-1), torch.tensor(least))).all())
    # With spread, never two floor picks within the radius, until the row's last min_commit masked slots (the
    # endgame: then all of them commit).
    floor_only = commit & (score < threshold) & (before.sum(-1, keepdim=True) > min_commit)
    if spread:
        few = before.sum(-1) <= min_commit
        assert torch.equal(commit[few], before[few])
    for d in range(1, min(spread, c - 1) + 1):
        assert not bool((floor_only[:, d:] & floor_only[:, :-d]).any()), f"spread floor took two slots {d} apart"
    if max_commit:
        assert bool((n <= max_commit).all())


def test_commit_handles_non_contiguous_state() -> None:
    """tokens / masked given as strided views are still updated in place."""
    logits = _logits(2, 9, 40, torch.float32, 5)
    big_t = torch.randint(0, 40, (2, 18))
    big_m = torch.rand(2, 18, generator=_gen(6)) < 0.5
    tokens, masked = big_t[:, ::2], big_m[:, ::2]
    t_ref, m_ref = tokens.clone(), masked.clone()
    tcommit.commit_step_triton(logits, tokens, masked, CommitRule(0.2, 2, 0))
    commit_step_ref(logits, t_ref, m_ref, CommitRule(0.2, 2, 0))
    assert torch.equal(big_t[:, ::2], t_ref) and torch.equal(big_m[:, ::2], m_ref)


# ---------------------------------------------------------------------------------------------- RMSNorm
@FEW
@given(rows=POSITIONS, d=st.sampled_from([1, 5, 33, 100, 257]), dtype=_DTYPE, seed=st.integers(0, 999))
def test_rms_norm_matches_twin(rows: int, d: int, dtype: torch.dtype, seed: int) -> None:
    g = _gen(seed)
    x = (torch.randn(rows, d, generator=g) * 2).to(dtype)
    w = torch.randn(d, generator=g).to(dtype)
    assert_close("normed", trms.rms_norm_triton(x, w, 1e-5), kernels.rms_norm_ref(x, w, 1e-5))


@FEW
@given(rows=POSITIONS, d=st.sampled_from([5, 33, 100, 257]), dtype=_DTYPE, seed=st.integers(0, 999))
def test_add_rms_norm_matches_twin(rows: int, d: int, dtype: torch.dtype, seed: int) -> None:
    g = _gen(seed)
    b = 1 if rows == 500 else 3
    x = torch.randn(b, rows, d, generator=g).to(dtype)
    delta = torch.randn(b, rows, d, generator=g).to(dtype)
    w = torch.randn(d, generator=g).to(dtype)
    y, h = trms.add_rms_norm_triton(x, delta, w, 1e-5)
    y_ref, h_ref = kernels.add_rms_norm_ref(x, delta, w, 1e-5)
    assert_close("residual", h, h_ref)
    assert_close("normed", y, y_ref)


def test_add_rms_norm_strided_rows() -> None:
    x = torch.randn(4, 6, 64)[:, ::2]  # rows strided, features contiguous
    delta = torch.randn(4, 3, 64)
    w = torch.randn(64)
    y, h = trms.add_rms_norm_triton(x, delta, w, 1e-6)
    y_ref, h_ref = kernels.add_rms_norm_ref(x, delta, w, 1e-6)
    assert_close("residual", h, h_ref)
    assert_close("normed", y, y_ref)


# ---------------------------------------------------------------------------------------------- rotary
@FEW
@given(t=st.sampled_from([1, 7, 63]), hq=st.sampled_from([1, 3, 4]), group=st.sampled_from([1, 2]),
       hd=st.sampled_from([2, 6, 16, 40]), dtype=_DTYPE, seed=st.integers(0, 999))
def test_rotary_matches_twin(t: int, hq: int, group: int, hd: int, dtype: torch.dtype, seed: int) -> None:
    """q and k as the model makes them: strided slices of one fused projection; grouped k heads."""
    hk = max(1, hq // group)
    g = _gen(seed)
    b = 2
    fused = torch.randn(b, t, hq + 2 * hk, hd, generator=g).to(dtype)
    q, k = fused[:, :, :hq], fused[:, :, hq : hq + hk]
    pos = torch.randint(0, 4000, (b, t), generator=g)
    cos, sin = kernels.rotary_tables(pos, hd, 10000.0)
    cos, sin = cos.to(dtype), sin.to(dtype)
    qo, ko = trot.apply_rotary_triton(q, k, cos, sin)
    q_ref, k_ref = kernels.apply_rotary_ref(q, k, cos, sin)
    assert_close("q", qo, q_ref)
    assert_close("k", ko, k_ref)


# ---------------------------------------------------------------------------------------------- attention
@FEW
@given(c=st.sampled_from([1, 7, 63]), ctx=st.sampled_from([0, 1, 37, 300]), h=st.sampled_from([1, 2, 4]),
       group=st.sampled_from([1, 2]), hd=st.sampled_from([8, 12, 32]), dtype=_DTYPE,
       splits=st.sampled_from([None, 1, 3]), with_valid=st.booleans(), seed=st.integers(0, 999))
def test_canvas_attention_matches_twin(c: int, ctx: int, h: int, group: int, hd: int, dtype: torch.dtype,
                                       splits: int | None, with_valid: bool, seed: int) -> None:
    """Canvas queries against cache slices (strided views of a bigger buffer), padded context masked out."""
    hk = max(1, h // group)
    b = 2
    g = _gen(seed)
    L = ctx + c
    cap = L + 5
    q = torch.randn(b, h, c, hd, generator=g).to(dtype)
    kc = torch.randn(b, hk, cap, hd, generator=g).to(dtype)
    vc = torch.randn(b, hk, cap, hd, generator=g).to(dtype)
    k, v = kc[:, :, :L], vc[:, :, :L]
    valid = None
    if with_valid:
        buf = torch.ones(b, cap, dtype=torch.bool)  # the cache's key_valid, sliced to L as the model does
        buf[:, :ctx] = torch.rand(b, ctx, generator=g) < 0.6  # the canvas keys are always valid
        valid = buf[:, :L]
    out = tattn.canvas_attention_triton(q, k, v, valid, splits)
    assert_close("attention output", out, kernels.canvas_attention_ref(q, k, v, valid))


def test_canvas_attention_fully_masked_split() -> None:
    """A split whose keys are all padding has weight 0 in the combine (no NaN leaks)."""
    q = torch.randn(1, 2, 3, 16)
    k = torch.randn(1, 2, 256, 16)
    v = torch.randn(1, 2, 256, 16)
    valid = torch.ones(1, 256, dtype=torch.bool)
    valid[:, :128] = False
    out = tattn.canvas_attention_triton(q, k, v, valid, num_splits=4)
    assert_close("attention output", out, kernels.canvas_attention_ref(q, k, v, valid))


# ---------------------------------------------------------------------------------------------- fused head
@FEW
@given(c=st.sampled_from([1, 7, 63]), v=st.sampled_from([5, 333, 700]), d=st.sampled_from([8, 40, 72]),
       splits=st.sampled_from([None, 1, 3]), bans=st.booleans(),
       bias=st.sampled_from([None, "vocab", "rows"]), seed=st.integers(0, 999))
def test_head_token_stats_matches_twin_fp32(c: int, v: int, d: int, splits: int | None, bans: bool,
                                            bias: str | None, seed: int) -> None:
    """Also with a logit bias (the sampler's novel-name penalty): one (V,) for every row, or one per batch row."""
    g = _gen(seed)
    b = 2
    h = torch.randn(b, c, d, generator=g)
    w = torch.randn(v, d, generator=g) / d**0.5 * 3
    kw: dict[str, Any] = {}
    if bans:
        kw = {"ban_id": 1, "pad_id": 0, "pad_ban": torch.rand(b, c, generator=g) < 0.5}
    if bias is not None:
        kw["bias"] = torch.randn((v,) if bias == "vocab" else (b, v), generator=g) * 4
    idx, s = thead.head_token_stats_triton(h, w, HeadBans(**kw), num_splits=splits)
    idx_ref, s_ref = khead.head_token_stats_ref(h, w, HeadBans(**kw))
    assert torch.equal(idx, idx_ref), "token differs"
    assert_close("score", s, s_ref, atol=1e-5)


@FEW
@given(c=st.sampled_from([1, 7, 63]), v=st.sampled_from([5, 333]), dtype=st.sampled_from(DTYPES[1:]),
       seed=st.integers(0, 999))
def test_head_token_stats_16bit(c: int, v: int, dtype: torch.dtype, seed: int) -> None:
    """16-bit inputs: the kernel keeps fp32 logits where the twin rounds them to 16 bits, so compare the chosen
    token by its fp32 logit (a near-tie may pick either) and the score with the statistics of those fp32 logits.
    (Against the twin's rounded logits a probability can be off by more than the 16-bit tolerance.)"""
    g = _gen(seed)
    d = 40
    h = torch.randn(1, c, d, generator=g).to(dtype)
    w = (torch.randn(v, d, generator=g) / d**0.5 * 3).to(dtype)
    idx, s = thead.head_token_stats_triton(h, w)
    _, s_ref = khead.head_token_stats_ref(h, w)
    exact = h.float() @ w.float().T  # (1, C, V)
    chosen = exact.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    assert_close("logit of the chosen token", chosen, exact.max(-1).values, dtype=dtype)
    _, s_exact = token_stats_ref(exact)
    assert_close("score", s, s_exact, atol=1e-4)
    # The twin's rounding, bounded: its logits are 16-bit, each off by up to half an ulp of its size (bf16: 2^-9
    # relative, about 0.016 at a logit of 8), which moves a probability by up to a few of those. The exact check above is the one that holds the kernel to 1e-4.
    assert_close("score against the twin", s, s_ref, dtype=dtype, atol=5e-2 if dtype == torch.bfloat16 else 1e-2)


def test_head_dispatcher_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """With EDIT_ENGINE_KERNELS=triton both variants (fused, matmul + statistics) match the twin."""
    monkeypatch.setenv("EDIT_ENGINE_KERNELS", "triton")
    g = _gen(3)
    h = torch.randn(1, 9, 24, generator=g)
    w = torch.randn(77, 24, generator=g)
    ban = torch.rand(1, 9, generator=g) < 0.5
    ref = khead.head_token_stats_ref(h, w, HeadBans(1, 0, ban))
    for fused in (True, False, None):
        idx, s = khead.head_token_stats(h, w, HeadBans(1, 0, ban), fused=fused)
        assert torch.equal(idx, ref[0]), f"token differs (fused={fused})"
        assert_close(f"score (fused={fused})", s, ref[1], atol=1e-5)
    tokens = torch.full((1, 9), 7)
    masked = torch.ones(1, 9, dtype=torch.bool)
    score, commit = kernels.commit_from_stats(ref[0], ref[1], tokens, masked, CommitRule(0.5, 2, 0))
    assert int(commit.sum()) >= 2 and torch.equal(masked, ~commit)


# ---------------------------------------------------------------------------------------------- the checks
def test_nan_never_passes() -> None:
    """The comparison helper rejects a NaN even where the reference is NaN too (poisoned buffers show up)."""
    x = torch.randn(5)
    y = x.clone()
    y[2] = float("nan")
    with pytest.raises(AssertionError, match="poisoned"):
        assert_close("poisoned", y, x)
    with pytest.raises(AssertionError):
        assert_close("both NaN", y, y.clone())


def test_poison_fixture_poisons() -> None:
    assert bool(torch.empty(3).isnan().all())
    assert bool((torch.empty(3, dtype=torch.int64) == -12345).all())
    assert bool((torch.empty(3, dtype=torch.bool).view(torch.uint8) == 0xFF).all())


def test_dispatchers_route_to_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """EDIT_ENGINE_KERNELS=triton sends every public op to its Triton launcher, =torch to the twin."""
    calls: list[str] = []

    def spy(mod: Any, name: str) -> None:
        real: Callable[..., Any] = getattr(mod, name)

        def wrapped(*a: Any, **k: Any) -> Any:
            calls.append(name)
            return real(*a, **k)

        monkeypatch.setattr(mod, name, wrapped)

    spy(tcommit, "commit_step_triton")
    spy(trms, "rms_norm_triton")
    spy(trms, "add_rms_norm_triton")
    spy(trot, "apply_rotary_triton")
    spy(tattn, "canvas_attention_triton")
    x = torch.randn(1, 4, 8)
    q = torch.randn(1, 4, 2, 8)
    cos, sin = kernels.rotary_tables(torch.arange(4).view(1, 4), 8, 10000.0)
    qa = torch.randn(1, 2, 4, 8)

    def run_all() -> None:
        kernels.commit_step(torch.randn(1, 4, 11), torch.zeros(1, 4, dtype=torch.long),
                            torch.ones(1, 4, dtype=torch.bool), CommitRule(0.5))
        kernels.rms_norm(x, torch.ones(8), 1e-5)
        kernels.add_rms_norm(x, x, torch.ones(8), 1e-5)
        kernels.apply_rotary(q, q, cos, sin)
        kernels.canvas_attention(qa, qa, qa)

    monkeypatch.setenv("EDIT_ENGINE_KERNELS", "torch")
    run_all()
    assert calls == []
    monkeypatch.setenv("EDIT_ENGINE_KERNELS", "triton")
    run_all()
    assert calls == ["commit_step_triton", "rms_norm_triton", "add_rms_norm_triton", "apply_rotary_triton",
                     "canvas_attention_triton"]


def test_bench_smoke(tmp_path: Any) -> None:
    """``python -m edit_engine.kernels.bench --smoke`` runs every section on tiny CPU shapes and writes its JSON."""
    from edit_engine.kernels import bench

    out = tmp_path / "bench.json"
    rows = bench.main(["--smoke", "--json", str(out)])
    data = json.loads(out.read_text())
    assert {r["op"] for r in data["rows"]} >= {"commit_step", "head", "add_rms_norm", "rotary", "attention"}
    assert len(rows) == len(data["rows"])
    for r in data["rows"]:
        assert r["bytes"] > 0 and r["triton_ms"] > 0 and r["torch_ms"] > 0


def test_gpu_block_sizes_under_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launchers' GPU block sizes (one row per program, 64-wide tiles, 16-row dot blocks) on small shapes;
    the other tests use the interpreter's larger blocks."""
    monkeypatch.setattr(tcommit, "gpu_sizes", lambda t: True)
    g = _gen(11)
    logits = torch.randn(1, 70, 1100, generator=g) * 3  # 70 slots > one 64-slot tile; V > one 1024 block
    tokens = torch.zeros(1, 70, dtype=torch.long)
    masked = torch.rand(1, 70, generator=g) < 0.8
    t_ref, m_ref = tokens.clone(), masked.clone()
    s, commit = tcommit.commit_step_triton(logits, tokens, masked, CommitRule(0.1, 3, 0))
    s_ref, commit_ref = commit_step_ref(logits, t_ref, m_ref, CommitRule(0.1, 3, 0))
    assert_close("score", s, s_ref, atol=SCORE_TOL)
    assert torch.equal(commit, commit_ref) and torch.equal(tokens, t_ref) and torch.equal(masked, m_ref)

    x, delta, w = torch.randn(5, 100, generator=g), torch.randn(5, 100, generator=g), torch.randn(100, generator=g)
    for name, a, b in zip(("normed", "residual"), trms.add_rms_norm_triton(x, delta, w, 1e-5),
                          kernels.add_rms_norm_ref(x, delta, w, 1e-5), strict=True):
        assert_close(name, a, b)

    q = torch.randn(1, 3, 2, 16, generator=g)
    cos, sin = kernels.rotary_tables(torch.arange(3).view(1, 3), 16, 10000.0)
    for name, a, b in zip("qk", trot.apply_rotary_triton(q, q[:, :, :1], cos, sin),
                          kernels.apply_rotary_ref(q, q[:, :, :1], cos, sin), strict=True):
        assert_close(name, a, b)

    qa = torch.randn(1, 2, 7, 16, generator=g)
    k = torch.randn(1, 1, 200, 16, generator=g)
    v = torch.randn(1, 1, 200, 16, generator=g)
    assert_close("attention output", tattn.canvas_attention_triton(qa, k, v),
                 kernels.canvas_attention_ref(qa, k, v))

    h = torch.randn(1, 7, 40, generator=g)
    wt = torch.randn(300, 40, generator=g) / 40**0.5 * 3
    idx, sc = thead.head_token_stats_triton(h, wt, HeadBans(ban_id=1))
    idx_ref, sc_ref = khead.head_token_stats_ref(h, wt, HeadBans(ban_id=1))
    assert torch.equal(idx, idx_ref)
    assert_close("head score", sc, sc_ref, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_spread_commit_across_tiles_with_ties(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """The spread floor at the GPU tile size (64): rows of 1-150 slots with many exact ties, so local maxima
    and the rank among them cross tile edges (a neighbour in the next tile, row ends at -1 and C)."""
    monkeypatch.setattr(tcommit, "gpu_sizes", lambda t: True)
    g = _gen(100 + seed)
    for c in (1, 2, 63, 64, 65, 129, 150):
        s = torch.randint(0, 3, (3, c), generator=g).float() / 3
        idx = torch.randint(0, 50, (3, c), generator=g)
        tokens = torch.randint(0, 50, (3, c), generator=g)
        # Dense masks, and sparse ones whose few masked slots sit in different tiles (the endgame rule counts a
        # whole row's masked slots: at most the floor left -> all commit).
        dense = torch.rand(3, c, generator=g) < 0.7
        sparse = torch.rand(3, c, generator=g) < 4.5 / c
        for masked, (threshold, floor, ceiling, radius) in itertools.product(
                (dense, sparse), ((2.0, 4, 0, 1), (0.5, 6, 0, 2), (2.0, 3, 3, 1), (0.0, 1, 0, 3), (2.0, 8, 0, 3))):
            t_ref, m_ref = tokens.clone(), masked.clone()
            t_tri, m_tri = tokens.clone(), masked.clone()
            rule = CommitRule(threshold, floor, ceiling, radius)
            _, commit = tcommit.commit_from_stats_triton(idx, s, t_tri, m_tri, rule)
            _, commit_ref = commit_from_stats_ref(idx, s, t_ref, m_ref, rule)
            assert torch.equal(commit, commit_ref), (c, threshold, floor, ceiling, radius)
            assert torch.equal(t_tri, t_ref) and torch.equal(m_tri, m_ref)
