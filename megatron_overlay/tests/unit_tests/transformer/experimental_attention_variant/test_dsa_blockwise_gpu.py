# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""GPU suite for the block-wise indexer path: at 131,072 tokens through DSAttention, with
DeepSeek-V3.2's indexer shape (64 heads x 128, top-k 2048), the torch and FlashInfer
backends select identical keys for tie policies 1 and 2 on tie-heavy scores, within a
bounded amount of memory; on CUDA, blocks select exactly what the whole matrix selects."""

from types import SimpleNamespace

import pytest
import torch

from megatron.core.transformer.experimental_attention_variant import dsa, dsa_blockwise
from megatron.core.transformer.experimental_attention_variant.dsa_topk import (
    TopkPolicy,
    select_topk,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
LONG, INDEX_HEADS, INDEX_DIM, TOPK = 131072, 64, 128, 2048
GIB = 1 << 30


@pytest.fixture(scope="module")
def flashinfer():
    return pytest.importorskip("flashinfer", reason="flashinfer-python is not installed")


def tie_heavy_indexer(seq, heads=INDEX_HEADS, dim=INDEX_DIM, seed=0):
    """bf16 small-integer q/k, unit weights: exact integer scores with wide plateaus."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randint(-1, 2, (seq, 1, heads, dim), generator=generator, device="cuda")
    k = torch.randint(-1, 2, (seq, 1, dim), generator=generator, device="cuda")
    k[torch.rand(seq, device="cuda", generator=generator) < 0.5] = 0  # half the keys score 0
    weights = torch.ones(seq, 1, heads, device="cuda")
    return q.bfloat16(), k.bfloat16(), weights


def brute_force_row(q, k, weights, row, tie_break):
    """One row's causal top-k by (score, column) order, as a sorted list."""
    head_scores = torch.relu(q[row, 0].float() @ k[: row + 1, 0].float().T)
    scores = (head_scores * weights[row, 0, :, None]).sum(0).double()  # exact integers
    columns = torch.arange(row + 1, device="cuda", dtype=torch.float64)
    tie = columns if tie_break == 2 else -columns  # |tie| / (row + 2) < 1: breaks ties only
    order = torch.argsort(scores + tie / (row + 2), descending=True)
    return sorted(order[: min(TOPK, row + 1)].tolist())


@pytest.mark.parametrize("tie_break", [1, 2])
def test_dsattention_at_128k_torch_and_flashinfer_select_the_same_keys(
    make_config, build_attention, attention_inputs, flashinfer, monkeypatch, tie_break
):
    q, k, weights = tie_heavy_indexer(LONG, seed=tie_break)
    found, peaks = {}, {}
    for backend in ("torch", "flashinfer"):
        config = make_config(
            dsa_indexer_n_heads=INDEX_HEADS,
            dsa_indexer_head_dim=INDEX_DIM,
            dsa_indexer_topk=TOPK,
            dsa_indexer_topk_backend=backend,
            dsa_indexer_topk_tie_break=tie_break,
            dsa_indexer_topk_deterministic=True,
        )
        attention = build_attention(config, device="cuda").eval()
        monkeypatch.setattr(attention.indexer, "forward_before_topk", lambda *_: (q, k, weights))
        seen = []

        def sparse_attention_records(**kwargs):  # the dense-free selection is under test here
            seen.append(kwargs["topk_indices"])
            sq, b = kwargs["query"].shape[:2]
            return torch.zeros(sq, b, config.num_attention_heads * config.v_head_dim, device="cuda")

        monkeypatch.setattr(dsa, "_run_sparse_attention", sparse_attention_records)
        inputs = {
            name: value.cuda() if isinstance(value, torch.Tensor) else value
            for name, value in attention_inputs(config, seq_len=LONG, batch=1).items()
        }
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        budget = dsa_blockwise.block_budget(None, torch.device("cuda")) / GIB
        with torch.no_grad():
            attention(**inputs)
        peaks[backend] = (torch.cuda.max_memory_allocated() - base) / GIB
        (found[backend],) = seen
        del attention, inputs
    assert found["torch"].shape == (1, LONG, TOPK) and found["torch"].dtype == torch.int32
    assert torch.equal(found["torch"], found["flashinfer"])
    for row in (5, 3000, LONG // 2 + 7, LONG - 1):  # against brute force, short and long rows
        expected = brute_force_row(q, k, weights, row, tie_break)
        selected = found["torch"][0, row]
        assert sorted(selected[selected >= 0].tolist()) == expected, row
    # Blocks take at most a share of the free memory (the torch scorer's fixed 2 GiB is less
    # on any card this runs on); beside them only the [LONG, TOPK] int32 indices (1 GiB) and
    # the indexer's inputs. Dense scoring would need terabytes.
    assert max(peaks.values()) < budget + 4, (peaks, budget)


@pytest.mark.parametrize("backend", ["torch", "flashinfer"])
@pytest.mark.parametrize("tie_break", [1, 2])
def test_blocks_on_cuda_select_what_the_whole_matrix_selects(backend, tie_break, request):
    if backend == "flashinfer":
        request.getfixturevalue("flashinfer")
    seq = 4096
    q, k, weights = tie_heavy_indexer(seq, seed=7)
    starts = torch.zeros(seq, dtype=torch.int64, device="cuda")
    ends = torch.arange(1, seq + 1, device="cuda")
    scores, _ = dsa.fused_qk_topk_naive(
        q, k, weights, TOPK, varlen_starts=starts, varlen_ends=ends
    )
    _, whole = select_topk(
        scores, TOPK, backend=backend, deterministic=True, tie_break=tie_break
    )
    plan = dsa_blockwise.BlockwisePlan(
        TopkPolicy(backend, deterministic=True, tie_break=tie_break), budget_bytes=64 << 20
    )
    blocks = dsa_blockwise.select_topk(
        q, k, weights, TOPK, plan, varlen_starts=starts, varlen_ends=ends
    )
    assert torch.equal(blocks, whole)


@pytest.fixture(scope="module")
def tilelang_logits():
    """Upstream's fused indexer-logits kernel (TileLang), or a skip."""
    pytest.importorskip("tilelang", reason="tilelang is not installed")
    fused = dsa_blockwise._tilelang_scorer()
    if fused is None:
        pytest.skip("megatron-core's TileLang indexer kernels are not available")
    return fused


def random_indexer(seq, sk=None, seed=0):
    """bf16 q/k with real-valued scores (no plateaus), float32 weights."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    sk = sk or seq
    q = torch.randn(seq, 1, INDEX_HEADS, INDEX_DIM, generator=generator, device="cuda")
    k = torch.randn(sk, 1, INDEX_DIM, generator=generator, device="cuda")
    weights = torch.randn(seq, 1, INDEX_HEADS, generator=generator, device="cuda") / 8
    return q.bfloat16(), k.bfloat16(), weights


def test_tilelang_block_scores_equal_upstreams_fused_logits(tilelang_logits):
    """The blocks the TileLang scorer computes (a window of key columns, the rows' bounds in
    it, no clean pass) hold, inside every row's bounds, exactly the logits of upstream's own
    call over all rows (indexer_fwd_interface with clean_logits, as lighting_indexer_indices
    runs it), bit for bit; across two packed sequences and causal rows."""
    seq = 8192
    q, k, weights = random_indexer(seq, seed=3)
    starts = torch.zeros(seq, dtype=torch.int64, device="cuda")
    starts[3000:] = 3000  # a second packed sequence
    ends = torch.arange(1, seq + 1, device="cuda")
    upstream = tilelang_logits(
        q[:, 0], k[:, 0], weights[:, 0], starts.int(), ends.int(), clean_logits=True
    )
    masks = dsa_blockwise.RowMasks.normalized(
        varlen_starts=starts, varlen_ends=ends, sk=seq, device=q.device
    )
    blocks = list(dsa_blockwise._blocks(seq, 1024))
    compared = 0
    for (start, end), window in zip(blocks, dsa_blockwise._windows(masks, blocks, seq)):
        first, last = window
        row_starts, row_ends = dsa_blockwise._window_bounds(masks, start, end, window, q.device)
        ours = dsa_blockwise._score_rows_tilelang(
            tilelang_logits, q[start:end], weights[start:end], k[first:last],
            row_starts, row_ends, False, True,
        )[0]  # fmt: skip
        columns = torch.arange(last - first, device="cuda")
        inside = (columns >= row_starts[:, None]) & (columns < row_ends[:, None])
        theirs = upstream[start:end, first:last]
        assert torch.equal(ours[inside], theirs[inside])
        assert torch.isneginf(upstream[start:end][:, :first]).all()
        assert torch.isneginf(upstream[start:end][:, last:]).all()
        compared += int(inside.sum())
    assert compared == int((ends - starts).sum())  # every visible score was compared


@pytest.mark.parametrize("backend", ["torch", "flashinfer"])
@pytest.mark.parametrize("tie_break", [1, 2])
def test_tilelang_blocks_select_what_upstreams_logits_select(
    tilelang_logits, backend, tie_break, request
):
    """Through the block-wise path with TileLang scoring, both backends pick exactly the keys
    select_topk picks from upstream's whole fused logits matrix (also on a context-parallel
    shape: fewer queries than keys, queries at the end of the sequence)."""
    if backend == "flashinfer":
        request.getfixturevalue("flashinfer")
    for seq, sk in ((4096, 4096), (2048, 8192)):
        q, k, weights = random_indexer(seq, sk, seed=tie_break)
        starts = torch.zeros(seq, dtype=torch.int64, device="cuda")
        ends = torch.arange(sk - seq + 1, sk + 1, device="cuda")  # the last seq positions
        upstream = tilelang_logits(
            q[:, 0], k[:, 0], weights[:, 0], starts.int(), ends.int(), clean_logits=True
        )
        _, whole = select_topk(
            upstream, TOPK, backend="torch", deterministic=True, tie_break=tie_break
        )
        plan = dsa_blockwise.BlockwisePlan(
            TopkPolicy(backend, deterministic=True, tie_break=tie_break),
            budget_bytes=256 << 20,
            use_tilelang=True,
        )
        blocks = dsa_blockwise.select_topk(
            q, k, weights, TOPK, plan, varlen_starts=starts, varlen_ends=ends
        )
        assert torch.equal(blocks[0], whole), (seq, sk)


def test_fused_training_step_matches_the_torch_loss_on_the_same_keys(tilelang_logits):
    """With TileLang, the sparse indexer loss runs on upstream's fused kernels (target, KL,
    indexer backward) over the keys the backend selected: its indices equal block-wise
    selection on TileLang's scores, and its loss and gradients agree with the block-wise
    torch loss on those indices (bf16 kernels against float32 torch: loose tolerances)."""
    seq, heads, dim = 2048, 16, 576
    q, k, weights = random_indexer(seq, seed=5)
    generator = torch.Generator(device="cuda").manual_seed(6)
    query = torch.randn(seq, 1, heads, dim, generator=generator, device="cuda").bfloat16()
    key = torch.randn(seq, 1, 1, dim, generator=generator, device="cuda").bfloat16()
    key = key.expand(-1, -1, heads, -1)  # absorbed MLA: one key head for every query head
    starts = torch.zeros(seq, dtype=torch.int64, device="cuda")
    ends = torch.arange(1, seq + 1, device="cuda")
    group = SimpleNamespace(size=lambda: 1, rank=lambda: 0)
    pg = SimpleNamespace(tp=group, cp=group)
    plan = dsa_blockwise.BlockwisePlan(
        TopkPolicy("torch", deterministic=True, tie_break=1), use_tilelang=True
    )
    leaves = [t.detach().clone().requires_grad_() for t in (q, weights, k)]
    calls = []
    original = dsa_blockwise.FusedSparseIndexerLoss.forward

    def record(ctx, *args):
        calls.append(True)
        return original(ctx, *args)

    dsa_blockwise.FusedSparseIndexerLoss.forward = staticmethod(record)
    try:
        indices, loss = dsa_blockwise.indexer_loss_function(plan)(
            *leaves, query, key, dim**-0.5, TOPK, 1.0, None, True, pg, starts, ends,
            None, None, False, True,
        )  # fmt: skip
    finally:
        dsa_blockwise.FusedSparseIndexerLoss.forward = staticmethod(original)
    assert calls, "the fused loss did not run"
    loss.backward()
    expected = dsa_blockwise.select_topk(
        q, k, weights, TOPK, plan, varlen_starts=starts, varlen_ends=ends
    )
    assert indices.dtype == torch.int32 and torch.equal(indices, expected)
    reference_leaves = [t.detach().clone().requires_grad_() for t in (q, weights, k)]
    masks = dsa_blockwise.RowMasks.normalized(
        varlen_starts=starts, varlen_ends=ends, sk=seq, device=q.device
    )
    spec = dsa_blockwise.LossSpec(
        softmax_scale=dim**-0.5, loss_coeff=1.0, sparse_loss=True, pg_collection=pg, masks=masks
    )
    reference = dsa_blockwise.indexer_loss(*reference_leaves, query, key, indices, spec)
    reference.backward()
    torch.testing.assert_close(loss.detach(), reference.detach(), rtol=2e-2, atol=1e-4)
    for ours, theirs in zip(leaves, reference_leaves):
        ours, theirs = ours.grad.float(), theirs.grad.float()
        assert theirs.abs().max() > 0
        relative = (ours - theirs).norm() / theirs.norm()
        assert relative < 5e-2, float(relative)
