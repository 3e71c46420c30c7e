# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""GPU suite (`rebaser apply --test gpu`): the torch backend is exact on CUDA, and FlashInfer's
top-k selects the same keys as the torch backend for tie policies 1 and 2, deterministically,
in fp32 and bf16, on tie-heavy rows up to 128K keys with k = 2048 and -inf masks."""

import pytest
import torch

from megatron.core.transformer.experimental_attention_variant import dsa_topk
from megatron.core.transformer.experimental_attention_variant.dsa_topk import select_topk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
NEG_INF = float("-inf")


def tie_heavy(rows, cols, dtype, seed=0, masked=0.2):
    """ReLU-sum-like scores: most entries are exact 0.0 ties, a few small integers, -inf masks."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.randint(-6, 4, (rows, cols), generator=generator, device="cuda").float()
    scores = scores.clamp_min(0.0)
    scores[torch.rand(rows, cols, generator=generator, device="cuda") < masked] = NEG_INF
    scores[0] = 0.0  # all equal
    scores[1, cols // 4 :] = NEG_INF  # fewer visible keys than k for small k
    return scores.to(dtype)


@pytest.mark.parametrize("tie_break", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_tie_path_matches_cpu_on_signed_zero_plateaus(tie_break, dtype):
    """Rows of mostly +0.0/-0.0 with a few positives: the CUDA boundary-tie kernel vs the CPU."""
    generator = torch.Generator(device="cuda").manual_seed(3)
    scores = torch.randint(0, 2, (64, 65536), generator=generator, device="cuda").float()
    scores = scores * torch.rand(64, 65536, generator=generator, device="cuda").lt(0.01)
    signs = torch.rand(64, 65536, generator=generator, device="cuda") < 0.5
    scores = torch.where((scores == 0) & signs, torch.full_like(scores, -0.0), scores).to(dtype)
    on_gpu = select_topk(scores, 2048, backend="torch", tie_break=tie_break)[1]
    on_cpu = select_topk(scores.cpu(), 2048, backend="torch", tie_break=tie_break)[1]
    assert torch.equal(on_gpu.cpu(), on_cpu)


@pytest.mark.parametrize("tie_break", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_cuda_kernel_reads_any_layout(tie_break, dtype, layout):
    """Transposed and strided score rows (last-dimension stride != 1), with NaN and signed
    zeros: the CUDA selection equals the CPU's on a contiguous copy."""
    scores = tie_heavy(128, 20000, torch.float32, seed=5)
    scores[2::9, ::11] = float("nan")
    scores[3::9] = torch.where(scores[3::9] == 0, torch.full_like(scores[3::9], -0.0), 0.0)
    scores = scores.to(dtype)
    if layout == "transposed":
        view = scores.t().contiguous().t()
    else:
        view = torch.stack([scores, scores.neg()], dim=-1)[..., 0]
    assert view.stride(-1) != 1 and torch.equal(view.isnan(), scores.isnan())
    on_gpu = select_topk(view, 2048, backend="torch", tie_break=tie_break)
    on_cpu = select_topk(scores.cpu(), 2048, backend="torch", tie_break=tie_break)
    assert torch.equal(on_gpu[1].cpu(), on_cpu[1])
    assert torch.equal(on_gpu[0].cpu(), on_cpu[0])
    assert ((on_gpu[1] >= -1) & (on_gpu[1] < scores.size(-1))).all()


@pytest.mark.parametrize("tie_break", [1, 2])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["aligned", "two bytes off", "odd stride"])
@pytest.mark.parametrize("kind", ["tie heavy", "relu"])
def test_cuda_kernel_reads_16_bit_rows_at_any_alignment(tie_break, dtype, layout, kind):
    """Contiguous 16-bit rows: read as words of two scores where every row starts 4-byte
    aligned, one score at a time where not. Either way, with NaN, signed zeros and -inf,
    the CUDA selection equals the CPU's."""
    cols = 40000
    generator = torch.Generator(device="cuda").manual_seed(11)
    if kind == "relu":
        scores = torch.randn(96, cols + 1, generator=generator, device="cuda").relu_()
    else:
        scores = tie_heavy(96, cols + 1, torch.float32, seed=11)
    scores[2::9, ::13] = float("nan")
    scores[3::9] = torch.where(scores[3::9] == 0, torch.full_like(scores[3::9], -0.0), 0.0)
    scores[4::9, 1::2] = NEG_INF  # every odd column masked: the words' high halves
    scores = scores.to(dtype)
    view = {
        "aligned": scores[:, :cols].contiguous(),
        "two bytes off": scores.flatten()[1 : 1 + 96 * cols].view(96, cols),
        "odd stride": scores[:, :cols],  # rows of cols + 1 scores: every other row is off
    }[layout]
    aligned = view.data_ptr() % 4 == 0 and view.stride(0) % 2 == 0
    assert view.stride(-1) == 1 and aligned == (layout == "aligned")
    on_gpu = select_topk(view, 2048, backend="torch", tie_break=tie_break)
    on_cpu = select_topk(view.cpu(), 2048, backend="torch", tie_break=tie_break)
    assert torch.equal(on_gpu[1].cpu(), on_cpu[1])
    assert torch.equal(on_gpu[0].cpu().view(torch.int16), on_cpu[0].view(torch.int16))


@pytest.mark.parametrize("tie_break", [1, 2])
def test_torch_backend_raw_output_is_deterministic(tie_break):
    """The kernel's raw columns (before select_topk orders them), run after run."""
    scores = tie_heavy(128, 131072, torch.float32, seed=11)
    scores[64:] = scores[64:].bfloat16().float().mul(7).floor()  # ties at non-zero k-th
    first = dsa_topk._torch_select(scores, 2048, prefer_large=tie_break == 2)
    for _ in range(20):
        assert torch.equal(first, dsa_topk._torch_select(scores, 2048, tie_break == 2))


@pytest.mark.parametrize("tie_break", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_kernel_orders_its_rows_as_finalize_does(tie_break, dtype, monkeypatch):
    """The kernel's own ordering (k <= MAX_ORDERED_WIDTH) against its unordered output
    through _finalize (larger k), on rows for every branch: unique k-th scores, ties at
    non-zero k-th scores, ±0.0 plateaus, NaN, fewer visible keys than k."""
    scores = tie_heavy(256, 50000, torch.float32, seed=13)
    scores[64:128] = torch.where(scores[64:128].isneginf(), NEG_INF, torch.rand_like(scores[64:128]))
    scores[128:160] = scores[128:160].neg()  # -0.0 plateaus, negative ties, +inf
    scores[160:170, ::3] = float("nan")
    scores[170:180, 1000:] = NEG_INF
    scores = scores.to(dtype)
    ordered = select_topk(scores, 2048, backend="torch", tie_break=tie_break)
    monkeypatch.setattr(dsa_topk._triton_rows(), "MAX_ORDERED_WIDTH", 0)
    unordered = select_topk(scores, 2048, backend="torch", tie_break=tie_break)
    assert torch.equal(ordered[1], unordered[1]) and torch.equal(ordered[0], unordered[0])
    on_cpu = select_topk(scores.cpu(), 2048, backend="torch", tie_break=tie_break)
    assert torch.equal(ordered[1].cpu(), on_cpu[1]) and torch.equal(ordered[0].cpu(), on_cpu[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_cuda_finalize_equals_the_torch_one(dtype, layout, index_dtype):
    """The Triton finalize (one program a row) against _finalize's torch operations, on
    distinct columns per row hitting NaN, -inf, ±0.0 and +inf scores, k up to 2048, given
    in any order or ascending (the program's shortcut past its sort: rows with no -inf or
    NaN slot, 3::5)."""
    scores = tie_heavy(512, 8192, torch.float32, seed=17)
    scores[::5, ::13] = float("nan")
    scores[1::5] = scores[1::5].neg()  # -0.0 plateaus, +inf
    scores[2::5, ::17] = float("inf")
    scores[3::5] = torch.randn_like(scores[3::5])
    scores = scores.to(dtype)
    view = scores.t().contiguous().t() if layout == "transposed" else scores
    generator = torch.Generator(device="cuda").manual_seed(18)
    for width in (1, 37, 2048):
        order = torch.rand(scores.shape, generator=generator, device="cuda").argsort(dim=-1)
        for indices in (order[:, :width], order[:, :width].sort(dim=-1).values):
            indices = indices.to(index_dtype)
            finalized = dsa_topk._triton_rows().finalize_rows(view, indices)
            expected = dsa_topk._finalize_with_torch(scores, indices)
            assert torch.equal(finalized[1], expected[1]) and torch.equal(finalized[0], expected[0])


@pytest.fixture(scope="module")
def flashinfer():
    module = pytest.importorskip("flashinfer", reason="flashinfer-python is not installed")
    dsa_topk._flashinfer_top_k()  # fails loudly if the installed FlashInfer is too old
    return module


@pytest.mark.parametrize("tie_break", [1, 2])
def test_torch_backend_is_exact_on_cuda(tie_break, reference_topk):
    scores = tie_heavy(16, 200, torch.float32, seed=tie_break)
    scores[8:] = torch.where(scores[8:].isneginf(), scores[8:], torch.rand_like(scores[8:]))
    _, indices = select_topk(scores, 37, backend="torch", tie_break=tie_break)
    assert indices.is_cuda and indices.dtype == torch.int32
    torch.testing.assert_close(
        indices.cpu(), reference_topk(scores.cpu(), 37, tie_break), rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tie_break", [1, 2])
@pytest.mark.parametrize("rows, cols, k", [(64, 4096, 256), (32, 131072, 2048), (8, 3000, 2048)])
@pytest.mark.parametrize("source", ["plateaus", "continuous"])
def test_flashinfer_selects_the_same_keys_as_torch(
    flashinfer, dtype, tie_break, rows, cols, k, source
):
    scores = tie_heavy(rows, cols, dtype, seed=cols + tie_break)
    if source == "continuous":  # unique boundaries: the torch backend's settled fast path
        scores = torch.where(scores.isneginf(), scores, torch.rand_like(scores))
    fi_values, fi_indices = select_topk(
        scores, k, backend="flashinfer", deterministic=True, tie_break=tie_break
    )
    th_values, th_indices = select_topk(scores, k, backend="torch", tie_break=tie_break)
    assert fi_indices.dtype == th_indices.dtype == torch.int32
    assert torch.equal(fi_indices, th_indices)
    assert torch.equal(fi_values, th_values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tie_break", [1, 2])
def test_flashinfer_deterministic_over_20_runs(flashinfer, dtype, tie_break):
    scores = tie_heavy(128, 131072, dtype, seed=11)
    first = select_topk(scores, 2048, backend="flashinfer", deterministic=True, tie_break=tie_break)
    raw_first = flashinfer.top_k(
        scores, 2048, sorted=False, deterministic=True, tie_break=tie_break, dsa_graph_safe=True
    )[1]
    for _ in range(20):
        again = select_topk(
            scores, 2048, backend="flashinfer", deterministic=True, tie_break=tie_break
        )
        assert torch.equal(first[1], again[1]) and torch.equal(first[0], again[0])
        raw = flashinfer.top_k(
            scores, 2048, sorted=False, deterministic=True, tie_break=tie_break, dsa_graph_safe=True
        )[1]
        assert torch.equal(raw_first, raw)


@pytest.mark.parametrize("backend", ["torch", "flashinfer"])
def test_nan_ranks_as_negative_infinity_on_cuda(flashinfer, backend):
    """NaN is never selected over a real score, is padding when selected, and never gives an
    out-of-range index; both backends agree with the CPU."""
    scores = tie_heavy(64, 8192, torch.float32, seed=2)
    scores[:, ::5] = float("nan")
    scores[7] = float("nan")
    values, indices = select_topk(
        scores, 2048, backend=backend, deterministic=True, tie_break=2
    )
    expected = select_topk(scores.cpu(), 2048, backend="torch", tie_break=2)
    assert torch.equal(indices.cpu(), expected[1]) and torch.equal(values.cpu(), expected[0])
    assert not values.isnan().any() and (indices[7] == -1).all()


@pytest.mark.parametrize("backend", ["torch", "flashinfer"])
def test_no_keys_give_an_empty_selection_on_cuda(flashinfer, backend):
    values, indices = select_topk(torch.zeros(2, 3, 0, device="cuda"), 8, backend=backend)
    assert indices.shape == values.shape == (2, 3, 0) and indices.is_cuda


def test_flashinfer_masked_rows_give_minus_one(flashinfer):
    scores = torch.full((4, 5000), NEG_INF, device="cuda")
    scores[1, :10] = 1.0
    _, indices = select_topk(scores, 64, backend="flashinfer", deterministic=True, tie_break=1)
    assert (indices[0] == -1).all()
    assert indices[1, :10].tolist() == list(range(10)) and (indices[1, 10:] == -1).all()


def test_dsattention_on_cuda_flashinfer_matches_torch(
    make_config, build_attention, attention_inputs, captured_topk, flashinfer, monkeypatch
):
    found = {}
    for backend in ("torch", "flashinfer"):
        config = make_config(
            dsa_indexer_topk_backend=backend,
            dsa_indexer_topk_tie_break=2,
            dsa_indexer_topk_deterministic=True,
            dsa_indexer_topk=16,
        )
        attention = build_attention(config, device="cuda").eval()
        inputs = {
            name: value.cuda() if isinstance(value, torch.Tensor) else value
            for name, value in attention_inputs(config, seq_len=64).items()
        }
        with torch.no_grad():
            attention(**inputs)
        found[backend] = captured_topk.pop()
    assert torch.equal(found["torch"], found["flashinfer"])
