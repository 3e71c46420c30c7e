# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Block-wise scoring and selection (dsa_blockwise.select_topk): identical, bit for bit, to
scoring the whole matrix with upstream's fused_qk_topk_naive and selecting it at once, under
every mask kind, with blocks that cut through tie-heavy rows; and bounded by the budget."""

import inspect
import logging

import pytest
import torch

from megatron.core.transformer.experimental_attention_variant import (
    dsa,
    dsa_blockwise,
    dsa_topk,
    dsa_upstream,
)
from megatron.core.transformer.experimental_attention_variant.dsa_topk import (
    TopkPolicy,
    select_topk,
)

SEQ, BATCH, HEADS, DIM, TOPK = 13, 2, 3, 4, 5


def tie_heavy(seq=SEQ, batch=BATCH, seed=0):
    """Small-integer q/k/weights: every score is an exact float sum, with plateaus of ties."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randint(-1, 2, (seq, batch, HEADS, DIM), generator=generator).float()
    k = torch.randint(-1, 2, (seq, batch, DIM), generator=generator).float()
    weights = torch.randint(0, 2, (seq, batch, HEADS), generator=generator).float()
    return q, k, weights


def masks(kind, seq=SEQ, batch=BATCH):
    causal = torch.full((seq, seq), float("-inf")).triu(1)
    if kind == "none":
        return {}
    if kind == "causal":
        return {"mask": causal}
    if kind == "batched":
        generator = torch.Generator().manual_seed(3)
        hidden = torch.rand(batch, seq, seq, generator=generator) < 0.3
        return {"mask": causal.expand(batch, -1, -1).masked_fill(hidden, float("-inf"))}
    if kind == "bounds":  # per-row key bounds over key columns: each block scores a window
        split = seq // 2
        return {
            "varlen_starts": torch.tensor([0] * split + [split] * (seq - split)),
            "varlen_ends": torch.arange(seq) + 1,
        }
    # Two packed sequences, keys at shifted global positions (as context parallelism gives).
    split = seq // 2
    starts = torch.tensor([0] * split + [split] * (seq - split)) + 100
    ends = torch.arange(seq) + 101
    return {
        "varlen_starts": starts,
        "varlen_ends": ends,
        "key_positions": torch.arange(seq) + 100,
    }


def naive_topk(q, k, weights, given, topk_policy=None):
    """(scores, indices) of the base's naive top-k: upstream's dense path without a policy,
    the hooked block-wise one with it. 0.16 has no fused_qk_topk_naive (DSAIndexer scores
    inline): there its scorer plus the mask, or dsa_blockwise.select_topk, which it calls."""
    naive = getattr(dsa, "fused_qk_topk_naive", None)
    takes = inspect.signature(naive).parameters if naive else {"mask": None}
    if set(given) - set(takes):
        pytest.skip(
            f"this base's naive top-k takes no {', '.join(sorted(set(given) - set(takes)))}"
        )
    if naive is not None:
        return naive(q, k, weights, TOPK, **given, topk_policy=topk_policy)
    if topk_policy is not None:
        return None, dsa_blockwise.select_topk(q, k, weights, TOPK, topk_policy, **given)
    scores = dsa_upstream.index_scores(q, weights, k)
    if "mask" in given:
        scores = scores + given["mask"]
    return scores, scores.topk(min(TOPK, k.size(0)), dim=-1)[1]


def plan(tie_break, budget_bytes=1, backend="torch", layer=None):
    return dsa_blockwise.BlockwisePlan(
        TopkPolicy(backend, tie_break=tie_break), budget_bytes=budget_bytes, layer=layer
    )


@pytest.mark.parametrize("kind", ["none", "causal", "batched", "varlen", "bounds"])
@pytest.mark.parametrize("tie_break", [1, 2])
@pytest.mark.parametrize("budget_rows", [1, 4, SEQ])
def test_blocks_select_exactly_what_the_whole_matrix_selects(kind, tie_break, budget_rows):
    q, k, weights = tie_heavy()
    given = masks(kind)
    scores, _ = naive_topk(q, k, weights, given)  # upstream's dense path
    _, whole = select_topk(scores, TOPK, backend="torch", tie_break=tie_break)
    row_bytes = BATCH * SEQ * 4 * (2 * HEADS + 6)
    blockwise = plan(tie_break, budget_bytes=row_bytes * budget_rows)
    none, indices = naive_topk(q, k, weights, given, topk_policy=blockwise)
    assert none is None  # the [b, sq, sk] scores are never materialised
    assert indices.dtype == torch.int32
    assert torch.equal(indices, whole)
    # The inputs really are tie-heavy: rows whose k-th score ties with a key left out.
    kth = scores.topk(TOPK, dim=-1).values[..., -1:]
    assert ((scores == kth).sum(-1) > (scores > kth).sum(-1) + 1).sum() >= 4


def test_policies_differ_on_these_inputs():
    """Control: on these plateaus the tie policy changes the set, so equality above means
    something."""
    q, k, weights = tie_heavy()
    _, small = naive_topk(q, k, weights, {}, topk_policy=plan(1))
    _, large = naive_topk(q, k, weights, {}, topk_policy=plan(2))
    assert not torch.equal(small, large)


def test_block_size_follows_the_budget(monkeypatch):
    q, k, weights = tie_heavy(seq=40)
    scored_rows = []
    original = dsa_upstream.index_scores

    def record(q_rows, weights_rows, keys, use_relu=True):
        scored_rows.append(q_rows.size(0))
        return original(q_rows, weights_rows, keys, use_relu)

    monkeypatch.setattr(dsa_upstream, "index_scores", record)
    per_row = BATCH * 40 * 4 * (2 * HEADS + 6)
    dsa_blockwise.select_topk(q, k, weights, TOPK, plan(1, budget_bytes=per_row * 7))
    assert scored_rows == [7] * 5 + [5]
    assert dsa_blockwise.rows_per_block(per_row, 40, per_row * 7) == 7
    assert dsa_blockwise.rows_per_block(per_row, 40, 1) == 1  # at least one row
    assert dsa_blockwise.rows_per_block(per_row, 40, 1 << 40) == 40  # at most sq


def test_no_keys_gives_an_empty_selection():
    q, _, weights = tie_heavy()
    indices = dsa_blockwise.select_topk(q, torch.zeros(0, BATCH, DIM), weights, TOPK, plan(1))
    assert indices.shape == (BATCH, SEQ, 0) and indices.dtype == torch.int32


def test_a_fused_scorer_scores_the_blocks_when_configured(monkeypatch, caplog):
    """TileLang's indexer-logits kernel, where available, scores each block (no selection)."""
    q, k, weights = tie_heavy()
    q, k = q.bfloat16(), k.bfloat16()
    calls = []

    def fake_indexer_logits(q_b, k_b, w_b, starts, ends, clean_logits=True, use_relu=True):
        calls.append(q_b.size(0))
        assert starts.tolist() == [0] * q_b.size(0) and ends.tolist() == [k_b.size(0)] * q_b.size(0)
        return dsa_upstream.index_scores(q_b[:, None], w_b[:, None], k_b[:, None], use_relu)[0]

    monkeypatch.setattr(dsa_blockwise, "_tilelang_scorer", lambda: fake_indexer_logits)
    fused = dsa_blockwise.BlockwisePlan(
        TopkPolicy("torch", tie_break=1), budget_bytes=1, use_tilelang=True, layer=77
    )
    with caplog.at_level(logging.INFO, logger=dsa_blockwise.__name__):
        indices = dsa_blockwise.select_topk(q, k, weights, TOPK, fused)
    assert calls == [1] * SEQ * BATCH
    expected = dsa_blockwise.select_topk(q, k, weights, TOPK, plan(1))
    assert torch.equal(indices, expected)
    assert "layer 77: scores by tilelang" in caplog.text


def test_each_layer_logs_its_scorer_and_selector_once(monkeypatch, caplog):
    monkeypatch.setattr(dsa_blockwise, "_logged_paths", set())
    q, k, weights = tie_heavy()
    with caplog.at_level(logging.INFO, logger=dsa_blockwise.__name__):
        for layer in (1, 1, 2, 2, 2):
            dsa_blockwise.select_topk(q, k, weights, TOPK, plan(2, layer=layer))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("DSA indexer layer 1: scores by torch")
    assert "top-k by the torch backend (tie_break=2" in lines[1]


def test_plan_comes_from_the_config(make_config):
    assert dsa_blockwise.plan_from_config(make_config()) is None
    config = make_config(dsa_indexer_topk_backend="torch", dsa_indexer_topk_tie_break=2)
    made = dsa_blockwise.plan_from_config(config, layer=3)
    assert made.policy == TopkPolicy("torch", tie_break=2) and made.layer == 3
    assert made.budget_bytes is None and not made.use_tilelang  # None: from free memory


def test_the_budget_comes_from_free_device_memory(monkeypatch):
    """A given budget is kept; on CUDA a share of the free memory (the allocator's cache
    counted), never below the 2 GiB default; elsewhere the default."""
    gib = 1 << 30
    cuda = torch.device("cuda", 0)
    assert dsa_blockwise.block_budget(123, cuda) == 123
    assert dsa_blockwise.block_budget(None, torch.device("cpu")) == 2 * gib
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100 * gib, 140 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 30 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 10 * gib)
    assert dsa_blockwise.block_budget(None, cuda) == 120 * gib // dsa_blockwise.FREE_MEMORY_SHARE
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (gib, 140 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    assert dsa_blockwise.block_budget(None, cuda) == 2 * gib  # the floor

    def no_device(device=None):
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_device)
    assert dsa_blockwise.block_budget(None, cuda) == 2 * gib  # the fallback


def test_the_torch_scorer_takes_the_fixed_budget(monkeypatch):
    """A block's shape may change how the torch scorer's matmul rounds a score, so its
    blocks never follow the free memory, which changes from run to run: the same input
    selects the same keys (a review found 1-row blocks keeping another of two keys one
    rounding step apart)."""
    gib = 1 << 30
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100 * gib, 140 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    assert dsa_blockwise.block_budget(None, cuda, follows_free_memory=False) == 2 * gib
    assert dsa_blockwise.block_budget(5, cuda, follows_free_memory=False) == 5
    asked = []
    budget = dsa_blockwise.block_budget
    monkeypatch.setattr(
        dsa_blockwise,
        "block_budget",
        lambda *args, **kwargs: asked.append(kwargs) or budget(*args, **kwargs),
    )
    q, k, weights = torch.randn(6, 1, 2, 8), torch.randn(9, 1, 8), torch.rand(6, 1, 2)
    plan = dsa_blockwise.BlockwisePlan(policy=TopkPolicy("torch", tie_break=1))
    dsa_blockwise.select_topk(q, k, weights, 4, plan)
    assert asked == [{"follows_free_memory": False}]


def test_large_blocks_are_aligned_and_capped():
    """Blocks of at least ROW_ALIGN rows start on its multiples (TileLang groups rows as in
    upstream's call); none exceeds MAX_BLOCK_ROWS."""
    align, cap = dsa_blockwise.ROW_ALIGN, dsa_blockwise.MAX_BLOCK_ROWS
    assert dsa_blockwise._aligned_rows(7) == 7
    assert dsa_blockwise._aligned_rows(3 * align + 5) == 3 * align
    assert dsa_blockwise._aligned_rows(10 * cap) == cap and cap % align == 0


def test_blocks_score_only_the_keys_their_rows_see(monkeypatch):
    """Causal key bounds: each block scores the window of key columns its rows can see, the
    fused scorer gets the rows' bounds inside it, and the keys equal whole-matrix selection.
    On the CPU the selection masks outside the bounds (TileLang's clean pass); on CUDA the
    filtered select reads them instead."""
    seq = 40
    q, k, weights = tie_heavy(seq=seq)
    q, k = q.bfloat16(), k.bfloat16()
    starts = torch.tensor([0] * 10 + [10] * 30)  # two packed sequences
    ends = torch.arange(seq) + 1
    calls = []

    def fake_indexer_logits(q_b, k_b, w_b, st, en, clean_logits=True, use_relu=True):
        calls.append((q_b.size(0), k_b.size(0), st.tolist(), en.tolist(), clean_logits))
        scores = dsa_upstream.index_scores(q_b[:, None], w_b[:, None], k_b[:, None], use_relu)[0]
        if not clean_logits:
            return scores
        columns = torch.arange(k_b.size(0))
        return scores.masked_fill((columns < st[:, None]) | (columns >= en[:, None]), float("-inf"))

    monkeypatch.setattr(dsa_blockwise, "_tilelang_scorer", lambda: fake_indexer_logits)
    rows = 8
    per_row = BATCH * (seq * 4 + 8 * (dsa_topk.candidate_slots(TOPK, seq) + TOPK))
    fused = dsa_blockwise.BlockwisePlan(
        TopkPolicy("torch", tie_break=2), budget_bytes=per_row * rows, use_tilelang=True
    )
    given = {"varlen_starts": starts, "varlen_ends": ends}
    scores, _ = naive_topk(q, k, weights, given)
    indices = dsa_blockwise.select_topk(q, k, weights, TOPK, fused, **given)
    _, whole = select_topk(scores, TOPK, backend="torch", tie_break=2)
    assert torch.equal(indices, whole)
    # Blocks of 8 rows; block i sees key columns [its first start, its last end).
    windows = [(count, width) for count, width, *_ in calls[::BATCH]]
    assert windows == [(8, 8), (8, 16 - 0), (8, 24 - 10), (8, 32 - 10), (8, 40 - 10)]
    _, _, block_starts, block_ends, clean = calls[2 * BATCH]  # rows 16..23, window from 10
    assert block_starts == [0] * 8 and block_ends == list(range(7, 15)) and clean
