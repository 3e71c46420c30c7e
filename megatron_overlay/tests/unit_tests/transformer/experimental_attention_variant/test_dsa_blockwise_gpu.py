# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""GPU suite for the block-wise indexer path: at 131,072 tokens through DSAttention, with
DeepSeek-V3.2's indexer shape (64 heads x 128, top-k 2048), the torch and FlashInfer
backends select identical keys for tie policies 1 and 2 on tie-heavy scores, within a
bounded amount of memory; on CUDA, blocks select exactly what the whole matrix selects."""

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
    assert max(peaks.values()) < 16, peaks  # dense scoring would need terabytes


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
