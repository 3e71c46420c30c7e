# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""The select_topk contract on the CPU: exact tie policies against a brute-force reference
on tie-heavy inputs, the int32 / -1 padding contract, determinism, and clear errors."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Optional

import pytest
import torch

from megatron.core.transformer.experimental_attention_variant import dsa_topk
from megatron.core.transformer.experimental_attention_variant.dsa_topk import select_topk

NEG_INF = float("-inf")


def tie_heavy_rows(rows: int, cols: int, seed: int) -> torch.Tensor:
    """ReLU-like scores: plateaus of 0.0 (and -0.0), a few repeated values, -inf masks."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(-2, 4, (rows, cols), generator=generator).double().clamp_min(0.0)
    scores[torch.rand(rows, cols, generator=generator) < 0.15] = -0.0
    scores[torch.rand(rows, cols, generator=generator) < 0.25] = NEG_INF
    scores[0] = 0.0  # an all-equal row
    scores[1] = NEG_INF  # a fully masked row
    scores[2, : cols // 2] = NEG_INF  # fewer visible keys than k
    return scores


@pytest.mark.parametrize("tie_break", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [0, 1, 5, 16, 37, 40, 64])
def test_torch_backend_matches_brute_force(tie_break, dtype, k, reference_topk):
    scores = tie_heavy_rows(9, 40, seed=k).to(dtype)
    values, indices = select_topk(scores, k, backend="torch", tie_break=tie_break)
    # The torch backend's own choice for policy 0 is policy 1 (smallest columns).
    expected = reference_topk(scores, k, tie_break=tie_break or 1)
    assert indices.dtype == torch.int32
    assert indices.shape == (9, min(k, 40))
    torch.testing.assert_close(indices, expected, rtol=0, atol=0)
    # Values are the scores as computed: gathered, no tie-breaking bias added.
    gathered = scores.gather(-1, indices.clamp_min(0).long())
    expected_values = torch.where(indices >= 0, gathered, torch.full_like(gathered, NEG_INF))
    assert torch.equal(values, expected_values)


@pytest.mark.parametrize("tie_break", [1, 2])
def test_rows_with_and_without_boundary_ties_mixed(tie_break, reference_topk):
    """Continuous rows settle from one float topk; tie rows take the exact path; both exact."""
    generator = torch.Generator().manual_seed(tie_break)
    scores = torch.rand(12, 500, generator=generator)
    scores[::3] = scores[::3].mul(4).floor()  # plateaus at the boundary
    scores[1::3] = scores[1::3].sub(0.5).relu()  # a 0.0 plateau below the k-th score
    scores[2, :300] = -0.0
    scores[5, 250:] = NEG_INF
    _, indices = select_topk(scores, 200, backend="torch", tie_break=tie_break)
    torch.testing.assert_close(indices, reference_topk(scores, 200, tie_break), rtol=0, atol=0)


def test_ties_at_the_kth_value_follow_the_policy():
    scores = torch.tensor([[5.0, 1.0, 1.0, 3.0, 1.0, 1.0, 0.0]])
    _, small = select_topk(scores, 4, backend="torch", tie_break=1)
    _, large = select_topk(scores, 4, backend="torch", tie_break=2)
    assert small.tolist() == [[0, 1, 2, 3]]
    assert large.tolist() == [[0, 3, 4, 5]]


def test_negative_zero_ranks_below_positive_zero():
    scores = torch.tensor([[-0.0, 0.0, -0.0, 0.0, -1.0]])
    _, indices = select_topk(scores, 3, backend="torch", tie_break=1)
    assert indices.tolist() == [[0, 1, 3]]  # both +0.0, then the first -0.0


def test_masked_and_padding_slots_are_minus_one_and_last():
    scores = torch.tensor([[NEG_INF, 2.0, NEG_INF, 1.0], [NEG_INF] * 4])
    values, indices = select_topk(scores, 3, backend="torch", tie_break=2)
    assert indices.tolist() == [[1, 3, -1], [-1, -1, -1]]
    assert values[0, :2].tolist() == [2.0, 1.0]
    assert torch.isneginf(values[0, 2]) and torch.isneginf(values[1]).all()


def test_k_larger_than_row_and_k_equal_to_row():
    scores = torch.tensor([[3.0, NEG_INF, 1.0]])
    _, wide = select_topk(scores, 10, backend="torch", tie_break=1)
    _, exact = select_topk(scores, 3, backend="torch", tie_break=1)
    assert wide.tolist() == exact.tolist() == [[0, 2, -1]]


@pytest.mark.parametrize("backend", ["torch", "flashinfer"])
def test_no_keys_give_an_empty_selection(backend):
    """sk == 0 (as upstream's naive path): an empty [b, sq, 0], whatever the backend."""
    values, indices = select_topk(torch.zeros(2, 3, 0), 4, backend=backend, tie_break=1)
    assert indices.shape == values.shape == (2, 3, 0) and indices.dtype == torch.int32


def test_leading_dimensions_are_kept(reference_topk):
    scores = tie_heavy_rows(12, 20, seed=3).reshape(2, 6, 20)
    _, indices = select_topk(scores, 7, backend="torch", tie_break=2)
    assert indices.shape == (2, 6, 7)
    torch.testing.assert_close(indices, reference_topk(scores, 7, 2), rtol=0, atol=0)


@pytest.mark.parametrize("tie_break", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nan_ranks_as_negative_infinity(tie_break, dtype, reference_topk):
    """A NaN is never selected over a real score and a selected one is padding (-1, -inf),
    on the settled path (rows without ties) and the exact path (rows with ties) alike."""
    generator = torch.Generator().manual_seed(tie_break)
    scores = torch.rand(6, 64, generator=generator)
    scores[3:] = torch.randint(0, 3, (3, 64), generator=generator).float()  # boundary ties
    scores[:, ::3] = float("nan")
    scores[2, 40:] = NEG_INF
    scores[5] = float("nan")
    scores = scores.to(dtype)
    for k in (5, 40, 63):
        values, indices = select_topk(scores, k, backend="torch", tie_break=tie_break)
        expected = reference_topk(scores.masked_fill(scores.isnan(), NEG_INF), k, tie_break)
        torch.testing.assert_close(indices, expected, rtol=0, atol=0)
        assert not values.isnan().any()
        assert torch.isneginf(values[indices == -1]).all()


def test_flashinfer_wrapper_ranks_nan_as_negative_infinity(fake_flashinfer, monkeypatch):
    """FlashInfer orders scores by bit pattern, so a NaN outranks +inf: the wrapper hands it
    -inf instead, and never reports a NaN column."""

    def by_bit_pattern(
        input, k, sorted=False, deterministic=False, tie_break=0, dsa_graph_safe=False
    ):
        bits = input.view(torch.int32).long()
        order = torch.where(bits < 0, -bits - 2**31, bits)
        return None, order.topk(k, dim=-1).indices

    fake_flashinfer(by_bit_pattern, "0.6.18")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    rows = torch.tensor([[1.0, float("nan"), 3.0, float("inf"), 2.0], [float("nan")] * 5])
    # _finalize's torch operations: these rows only pretend to be on CUDA.
    chosen = dsa_topk._flashinfer_select(rows, 3, True, 1)
    values, indices = dsa_topk._finalize_with_torch(rows, chosen)
    assert indices.tolist() == [[2, 3, 4], [-1, -1, -1]]
    assert torch.isneginf(values[1]).all()


@pytest.mark.parametrize("tie_break", [1, 2])
def test_deterministic_raw_output_across_runs(tie_break):
    """The backend's raw columns (before the canonical ordering of select_topk), run after run
    and with other thread counts, on tie-heavy rows where any choice among ties would show."""
    scores = tie_heavy_rows(64, 300, seed=11).float()
    scores[32:] = torch.rand(32, 300, generator=torch.Generator().manual_seed(2)).mul(3).floor()
    first = dsa_topk._torch_select(scores, 50, prefer_large=tie_break == 2)
    threads = torch.get_num_threads()
    try:
        for run in range(6):
            torch.set_num_threads(1 + run % 2)
            again = dsa_topk._torch_select(scores.clone(), 50, prefer_large=tie_break == 2)
            assert torch.equal(first, again), f"run {run}"
    finally:
        torch.set_num_threads(threads)


def test_row_chunks_give_the_same_answer(monkeypatch):
    scores = tie_heavy_rows(33, 64, seed=5).float()
    whole = select_topk(scores, 20, backend="torch", tie_break=2)[1]
    monkeypatch.setattr(dsa_topk, "_CHUNK_ELEMENTS", 64 * 4)  # four rows a chunk
    chunked = select_topk(scores, 20, backend="torch", tie_break=2)[1]
    assert torch.equal(whole, chunked)


def test_no_full_sort_of_the_row(monkeypatch):
    """With k << n only k-wide tensors are sorted; the n-wide row never is."""
    n, k = 4096, 16
    widths = []
    real_sort = torch.Tensor.sort

    def recording_sort(self, *args, **kwargs):
        widths.append(self.size(-1))
        return real_sort(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "sort", recording_sort)
    monkeypatch.setattr(torch, "sort", lambda t, *a, **kw: recording_sort(t, *a, **kw))
    monkeypatch.setattr(torch.Tensor, "argsort", lambda *a, **kw: pytest.fail("argsort used"))
    select_topk(tie_heavy_rows(4, n, seed=1).float(), k, backend="torch", tie_break=1)
    assert widths and max(widths) <= 2 * k


KERNEL_ON_CPU = """
import json, sys, torch
from megatron.core.transformer.experimental_attention_variant import dsa_topk, dsa_topk_triton
# Small blocks, so every loop of the kernel carries its state across steps.
dsa_topk_triton.ROW_BLOCK = dsa_topk_triton.WALK_BLOCK = 64
dsa_topk_triton.CANDIDATE_BLOCK = 16
scores = torch.load(sys.argv[1])
width = int(sys.argv[2])
found = {}
for dtype in (torch.float32, torch.bfloat16):
    rows = scores.to(dtype)
    layouts = [
        ("contiguous", rows, "small"),
        ("contiguous", rows, "large"),
        ("transposed", rows.t().contiguous().t(), "small"),
        ("strided", torch.stack([rows, rows.neg()], dim=-1)[..., 0], "large"),
    ]
    for layout, view, policy in layouts:
        chosen = dsa_topk_triton.select_rows(view, width, policy == "large")
        found[f"{dtype} {layout} {policy} unordered"] = dsa_topk._finalize(rows, chosen)[1].tolist()
        # The CUDA finalize (FlashInfer's columns take it) against the torch one; a column
        # outside the row counts as padding.
        for given in (chosen.long(), chosen.sort(dim=-1).values):  # ascending: no sort
            finalized = dsa_topk_triton.finalize_rows(view, given)
            assert all(map(torch.equal, finalized, dsa_topk._finalize_with_torch(rows, given)))
        # -1, or past the int32 range (2**32 + 5 must not read as column 5)
        for wrong in (-1, 2**32 + 5):
            outside = torch.cat([torch.full((len(chosen), 1), wrong), chosen[:, 1:].long()], -1)
            finalized = dsa_topk_triton.finalize_rows(view, outside)
            values, indices = dsa_topk._finalize_with_torch(rows, chosen[:, 1:])
            padded = (torch.cat([values, torch.full_like(values[:, :1], float("-inf"))], dim=-1),
                      torch.cat([indices, torch.full_like(indices[:, :1], -1)], dim=-1))
            assert all(map(torch.equal, finalized, padded)), wrong
        values, indices = dsa_topk_triton.select_rows_ordered(view, width, policy == "large")
        gathered = rows.gather(-1, indices.long().clamp_min(0))
        assert torch.equal(values, gathered.masked_fill(indices < 0, float("-inf")))
        found[f"{dtype} {layout} {policy} ordered"] = indices.tolist()
print(json.dumps(found))
"""


def kernel_test_rows() -> torch.Tensor:
    """Rows for every branch of the CUDA kernel: a unique k-th score, ties at a non-zero k-th
    score, ±0.0 and NaN rows (radix select), fewer visible keys than k."""
    generator = torch.Generator().manual_seed(4)
    scores = torch.rand(9, 70, generator=generator)  # unique k-th score
    scores[1:3] = torch.randint(0, 5, (2, 70), generator=generator).float()  # non-zero ties
    scores[3] = torch.randint(-2, 3, (70,), generator=generator).float().clamp_min(0.0)
    scores[3, torch.rand(70, generator=generator) < 0.3] = -0.0  # signed zeros at the k-th
    scores[4] = torch.where(torch.rand(70, generator=generator) < 0.5, -0.0, 0.0)
    scores[5, :50] = NEG_INF  # fewer visible keys than k
    scores[6, ::7] = float("nan")  # NaN ranks as -inf
    scores[7] = -torch.randint(1, 4, (70,), generator=generator).float()  # negative ties
    scores[8, 10:] = NEG_INF
    scores[8, :10] = float("nan")  # only NaN and -inf below the visible keys
    return scores


def interpreted(
    script: str, *args: str, spelled: str = "1", timeout: Optional[float] = None
) -> str:
    """The last line a script prints, run by Triton's interpreter, which must be switched on
    before Triton is imported: a fresh process, the patched tree on its path."""
    tree = str(Path(dsa_topk.__file__).resolve().parents[4])
    env = dict(
        os.environ,
        TRITON_INTERPRET=spelled,
        PYTHONPATH=os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")]),
    )
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.triton_interpreter
def test_cuda_kernel_logic_is_exact_for_any_layout(tmp_path, reference_topk):
    """The CUDA selection (a Triton kernel), run on the CPU by Triton's interpreter, which must
    be switched on before Triton is imported: a fresh process. Transposed and strided score
    rows are read through their strides."""
    pytest.importorskip("triton")
    scores = kernel_test_rows()
    torch.save(scores, tmp_path / "scores.pt")
    found = json.loads(interpreted(KERNEL_ON_CPU, str(tmp_path / "scores.pt"), "30"))
    assert len(found) == 16
    as_neg_inf = scores.nan_to_num(nan=NEG_INF, posinf=float("inf"), neginf=NEG_INF)
    for case, indices in found.items():
        dtype = torch.bfloat16 if "bfloat16" in case else torch.float32
        expected = reference_topk(as_neg_inf.to(dtype), 30, 2 if "large" in case else 1)
        assert indices == expected.tolist(), case


FILTERED_ON_CPU = """
import json, sys, torch
from megatron.core.transformer.experimental_attention_variant import dsa_topk_triton as T
# Tiny buffers and samples, so rows take every branch: the sampled threshold, every finite
# score (short rows, bounds), the full radix select when a buffer (or a stripe's) overflows,
# the segmented select's second pass when a run's buffer overflows.
T.MIN_CAPACITY, T.CAPACITY_FACTOR, T.SAMPLE_CHUNKS, T.SAMPLE_CHUNK = 16, 2, 4, 8
T.SEGMENT_SAMPLE_CHUNKS = 4
T.FILTER_BLOCK = T.ROW_BLOCK = 16
T.FILTER_WARPS = T.SEGMENT_WARPS = 1
T.MAX_STRIPES, T.STRIPE_CHUNK, T.MIN_STRIPE_SLOTS, T.PACK_SLOTS = 4, 16, 4, 4
# Runs of a thread's few scores (32-bit) and of wider steps (16-bit), with few slots.
T.GEOMETRY_OF = {32: T.Geometry(8, 4, 4, 2), 16: T.Geometry(4, 8, 16, 4)}
# The split select: chunks of a few steps, runs of few slots (they overflow at k = 300).
T.SPLIT_GEOMETRY_OF = {32: T.SplitGeometry(48, 2, 4, 4, 1), 16: T.SplitGeometry(64, 4, 8, 4, 1)}
T.SPLIT_THRESHOLD_WARPS = T.SPLIT_SELECT_WARPS = 1
scores, starts, ends = torch.load(sys.argv[1])
found = {}
# mode: "row" one program a row, "stripes" stripes of 48 scores, "segmented" a program a
# row, "persistent" programs looping over the rows, "split" the split select's launches.
cases = [(5, False, "contiguous", "row"), (12, True, "transposed", "row"),
         (5, False, "bounded", "row"), (5, True, "contiguous", "stripes"),
         (300, False, "contiguous", "stripes"), (12, True, "bounded", "stripes"),
         (5, False, "contiguous", "segmented"), (12, True, "contiguous", "segmented"),
         (12, False, "transposed", "segmented"), (300, True, "contiguous", "segmented"),
         (5, True, "bounded", "segmented"), (12, False, "bounded", "persistent"),
         (300, False, "bounded", "persistent"), (12, True, "contiguous", "persistent"),
         (5, False, "contiguous", "split"), (12, True, "transposed", "split"),
         (300, False, "bounded", "split"), (12, True, "bounded", "split"),
         (30, False, "contiguous", "split"), (12, False, "shifted", "segmented"),
         (12, True, "odd", "segmented")]
# How the segmented select reads each row: 16-bit rows 4-byte aligned as words of two
# (CONTIGUOUS == T.PAIRED); "shifted" rows start 2 bytes off, "odd" ones have an odd stride.
launched, launch = set(), T.segmented_select.run
def recording(*args, **kwargs):
    launched.add((str(args[0].dtype), kwargs["CONTIGUOUS"]))
    return launch(*args, **kwargs)
T.segmented_select.run = recording
# fp16 rows through the segmented select only (words of two, and not).
fp16_cases = [case for case in cases if case[3] == "segmented"]
for dtype, dtype_cases in ((torch.float32, cases), (torch.bfloat16, cases),
                           (torch.float16, fp16_cases)):
    rows = scores.to(dtype)
    for width, large, layout, mode in dtype_cases:
        T.SEGMENTED = mode in ("segmented", "persistent", "split")
        T.SPLIT = mode == "split"
        T.STRIPE_SCORES = 48 if mode == "stripes" else 0
        T.PROGRAMS_PER_SM = 2 if mode == "persistent" else 0
        if layout == "bounded":
            v, i = T.select_rows_filtered(rows, width, large, starts, ends, column_offset=1000)
        else:
            view = {"transposed": rows.t().contiguous().t(), "shifted": rows[:, 1:],
                    "odd": rows[:, :-1].contiguous()}.get(layout, rows)
            v, i = T.select_rows_filtered(view, width, large)
        found[f"{dtype} {width} {large} {layout} {mode}"] = (i.tolist(), v.float().tolist())
found["launched"] = sorted(map(str, launched))
print(json.dumps(found))
"""


@pytest.mark.triton_interpreter
def test_filtered_cuda_select_is_exact_in_every_branch(tmp_path):
    """The filtered CUDA selects (dsa_topk_triton.select_rows_filtered: one program a row,
    striped, and the segmented select, a program a row and persistent), run by Triton's
    interpreter: equal, indices and values, to the exact CPU path on tie-heavy rows (±0.0,
    NaN, negative ties, plateaus that overflow the candidate buffer, sorted rows, fewer
    visible keys than k, rows of one value, rows of -inf and NaN only), for both policies,
    32- and 16-bit scores, transposed rows, per-row key bounds with a column offset, and k
    above the row's length (padding), 16-bit rows read as words of two and rows that cannot
    be (starting 2 bytes off, an odd stride). With k = 300 every finite score is a candidate, so the
    segmented select's runs overflow their buffers and take the second pass; the 50 ties of
    row 10 overflow the candidate buffer for k = 12: the full radix select."""
    pytest.importorskip("triton")
    generator = torch.Generator().manual_seed(0)
    n = 200
    scores = kernel_test_rows().repeat(1, 3)[:, :n]
    scores = torch.cat([scores, torch.rand(5, n, generator=generator)])
    scores[9] = torch.arange(n).float()  # sorted: the sample's runs see the whole range
    scores[10] = 0.0
    scores[10, 150:] = 1.0  # 50 ties at the k-th score: overflow, full radix select
    scores[11] = torch.randint(0, 3, (n,), generator=generator).float()
    scores[12] = 2.5  # every score tied
    scores[13] = NEG_INF
    scores[13, ::3] = float("nan")  # no finite score at all
    rows_count = scores.size(0)
    starts = torch.randint(0, n, (rows_count,), generator=generator)
    ends = starts + torch.randint(0, n, (rows_count,), generator=generator)
    torch.save((scores, starts, ends), tmp_path / "rows.pt")
    found = json.loads(interpreted(FILTERED_ON_CPU, str(tmp_path / "rows.pt")))
    assert sorted(found.pop("launched")) == [
        f"('torch.{dtype}', {contiguous})"
        for dtype, contiguous in [("bfloat16", 2), ("bfloat16", False), ("bfloat16", True),
                                  ("float16", 2), ("float16", False), ("float16", True),
                                  ("float32", False), ("float32", True)]
    ]  # fmt: skip
    assert len(found) == 42 + 7
    columns = torch.arange(n)
    outside = (columns < starts[:, None]) | (columns >= ends[:, None])
    for case, (indices, values) in found.items():
        dtype = getattr(torch, case.split()[0].removeprefix("torch."))
        width, large, layout = int(case.split()[1]), case.split()[2] == "True", case.split()[3]
        rows = scores.to(dtype)
        if layout == "bounded":
            rows = rows.masked_fill(outside, NEG_INF)
        rows = {"shifted": rows[:, 1:], "odd": rows[:, :-1]}.get(layout, rows)
        expected_values, expected = select_topk(rows, width, backend="torch", tie_break=1 + large)
        if layout == "bounded":
            expected = torch.where(expected >= 0, expected + 1000, expected)
        pad = width - expected.size(-1)
        expected = torch.nn.functional.pad(expected, (0, pad), value=-1)
        expected_values = torch.nn.functional.pad(expected_values, (0, pad), value=NEG_INF)
        assert indices == expected.tolist(), case
        assert values == expected_values.float().tolist(), case


CANDIDATES_WITH_A_NAN = """
import json, torch, triton, triton.language as tl
from megatron.core.transformer.experimental_attention_variant import dsa_topk_triton as T

@triton.jit
def select(keys, columns, found, threshold, neg_inf_key, width, out, values, answered,
           CAPACITY: tl.constexpr):
    done = T.select_candidates(keys, columns, found, threshold, neg_inf_key, width, out,
                               values, 0, tl.float32, CAPACITY, 32, False)
    tl.store(answered, done.to(tl.int32))

neg_inf_key = T._negative_infinity_key(torch.float32)
found = {}
for name, scores in {"nan among k or more": [3.0, float("nan"), 1.0, 2.0, 5.0],
                     "no nan": [3.0, 0.5, 1.0, 2.0, 5.0],
                     "nan, fewer than k": [3.0, float("nan")]}.items():
    bits = torch.tensor(scores).view(torch.int32)
    keys = torch.full((16,), -2**31, dtype=torch.int32)
    keys[: len(scores)] = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    columns = torch.arange(16, dtype=torch.int32)
    out = torch.full((3,), 77, dtype=torch.int32)  # poison: what nothing writes stays 77
    values = torch.full((3,), 77.0)
    answered = torch.zeros(1, dtype=torch.int32)
    select[(1,)](keys, columns, len(scores), keys[: len(scores)].min().item(), neg_inf_key,
                 3, out, values, answered, CAPACITY=16)
    found[name] = [answered.item(), out.tolist(), values.tolist()]
print(json.dumps(found))
"""


@pytest.mark.triton_interpreter
def test_candidates_holding_a_nan_leave_the_row_to_the_radix_select(tmp_path):
    """The segmented select's collecting passes admit positive NaN: select_candidates then
    answers only where every finite score is a candidate (the NaN as padding); with k or
    more candidates it writes nothing at all (no padding either, which the radix select's
    threads would have to overwrite after it) and says so."""
    pytest.importorskip("triton")
    found = json.loads(interpreted(CANDIDATES_WITH_A_NAN))
    assert found["nan among k or more"] == [0, [77, 77, 77], [77.0, 77.0, 77.0]]
    assert found["no nan"] == [1, [0, 3, 4], [3.0, 2.0, 5.0]]
    assert found["nan, fewer than k"] == [1, [0, -1, -1], [3.0, NEG_INF, NEG_INF]]


@pytest.mark.triton_interpreter
def test_interpreter_spelled_true_runs_no_inline_assembly(tmp_path):
    """Triton interprets for TRITON_INTERPRET=true as for 1; the selection must then store
    its candidates by tl.store, not by the inline PTX the interpreter cannot run."""
    pytest.importorskip("triton")
    script = (
        "import torch\n"
        "from megatron.core.transformer.experimental_attention_variant import dsa_topk_triton as T\n"
        "rows = torch.arange(300.0).reshape(2, 150)\n"
        "print(sorted(T.select_rows_filtered(rows, 5, False)[1][0].tolist()))\n"
    )
    assert interpreted(script, spelled="true", timeout=600) == "[145, 146, 147, 148, 149]"


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(backend="cuda"), ValueError, "unknown top-k backend"),
        (dict(backend="torch", tie_break=3), ValueError, "tie_break must be one of"),
        (dict(backend="torch", tie_break=True), ValueError, "tie_break must be one of"),
    ],
)
def test_argument_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        select_topk(torch.zeros(2, 4), 2, **kwargs)
    with pytest.raises(ValueError, match="k must be non-negative"):
        select_topk(torch.zeros(2, 4), -1, backend="torch")
    with pytest.raises(TypeError, match="floating point"):
        select_topk(torch.zeros(2, 4, dtype=torch.int64), 1, backend="torch")


def test_flashinfer_backend_on_cpu_says_what_to_do():
    with pytest.raises(
        RuntimeError, match="runs on CUDA tensors.*dsa_indexer_topk_backend='torch'"
    ):
        select_topk(torch.zeros(2, 8), 2, backend="flashinfer", tie_break=1)


@pytest.fixture
def fake_flashinfer(monkeypatch):
    """Install a stand-in `flashinfer` module; its top_k has the signature the test gives."""

    def _install(top_k, version):
        module = types.ModuleType("flashinfer")
        module.__version__ = version
        if top_k is not None:
            module.top_k = top_k
        monkeypatch.setitem(sys.modules, "flashinfer", module)
        dsa_topk._flashinfer_top_k.cache_clear()
        return module

    yield _install
    dsa_topk._flashinfer_top_k.cache_clear()


def test_old_flashinfer_is_rejected_with_the_minimum_version(fake_flashinfer):
    def old_top_k(input, k, sorted=False, deterministic=False):  # 0.6.8's keywords
        raise AssertionError("must not be called")

    fake_flashinfer(old_top_k, "0.6.8")
    with pytest.raises(
        RuntimeError, match=r"flashinfer 0\.6\.8 .*tie_break, dsa_graph_safe.*>= 0\.6\.10"
    ):
        dsa_topk._flashinfer_top_k()


def test_missing_flashinfer_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # makes `import flashinfer` fail
    dsa_topk._flashinfer_top_k.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"pip install 'flashinfer-python>=0\.6\.10'"):
            dsa_topk._flashinfer_top_k()
    finally:
        dsa_topk._flashinfer_top_k.cache_clear()


def test_flashinfer_keywords_are_passed(fake_flashinfer, monkeypatch):
    """The call FlashInfer gets, checked with a stand-in that answers like torch.topk."""
    calls = []

    def top_k(input, k, sorted=False, deterministic=False, tie_break=0, dsa_graph_safe=False):
        calls.append(
            dict(
                k=k,
                sorted=sorted,
                deterministic=deterministic,
                tie_break=tie_break,
                dsa_graph_safe=dsa_graph_safe,
            )
        )
        values, indices = torch.topk(input, k, sorted=False)
        return values, indices

    fake_flashinfer(top_k, "0.7.2.post1")
    rows = torch.tensor([[1.0, NEG_INF, 3.0, 2.0]])
    # Run the CUDA-only wrapper's body on the CPU: the device check is the only CUDA part.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    indices = dsa_topk._flashinfer_select(rows, 4, deterministic=True, tie_break=2)
    assert calls == [dict(k=4, sorted=False, deterministic=True, tie_break=2, dsa_graph_safe=True)]
    values, final = dsa_topk._finalize_with_torch(rows, indices)
    assert final.tolist() == [[0, 2, 3, -1]]
    with pytest.raises(ValueError, match="k <= 2048"):
        dsa_topk._flashinfer_select(torch.zeros(1, 4096), 2049, deterministic=True, tie_break=1)


def test_filtered_select_takes_the_shapes_where_it_wins():
    """The filtered CUDA select takes k up to MAX_FILTER_WIDTH on rows up to MAX_FILTER_ROW
    scores (measured on the H200: 4096 x 128K rows 3.4x faster than the topk(k+1) kernel,
    16 x 1M rows 20x slower); the others keep the topk(k+1) kernel."""
    triton_rows = pytest.importorskip(
        "megatron.core.transformer.experimental_attention_variant.dsa_topk_triton"
    )
    longest = torch.empty(2, triton_rows.MAX_FILTER_ROW)
    assert triton_rows.filters(longest, 2048)
    assert not triton_rows.filters(torch.empty(2, triton_rows.MAX_FILTER_ROW + 1), 2048)
    assert not triton_rows.filters(longest, triton_rows.MAX_FILTER_WIDTH + 1)
    assert not triton_rows.filters(longest.double(), 2048)
    cuda = torch.device("cuda")
    assert dsa_topk.selects_in_bounds(cuda, torch.float32, 2048, "torch", 131072)
    assert not dsa_topk.selects_in_bounds(cuda, torch.float32, 2048, "torch", 1 << 20)
    assert not dsa_topk.selects_in_bounds(cuda, torch.float32, 2048, "flashinfer", 131072)
    assert not dsa_topk.selects_in_bounds(torch.device("cpu"), torch.float32, 2048, "torch", 8)
