# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""The torch backend's CUDA selection: one Triton program per row, exact for every tie policy.

Scores are ranked by order keys (the float's bit pattern with negatives flipped, so -0.0 <
+0.0; NaN ranks as -inf). Each program finds the row's k-th largest key and writes the
row's ``width`` selected columns, in no particular order (``dsa_topk`` orders them):

* float32 rows come with ``torch.topk(k+1)``'s candidates. A row whose k-th key is unique
  at the boundary (the usual case for ReLU sums) takes them as they are; a row with ties at
  a non-zero k-th score keeps the candidates above it and walks the row once for the
  policy's ties, stopping as soon as it has them.
* 16-bit rows (where the k-th score nearly always ties), and float32 rows whose k-th score is
  ±0.0 or that hold a NaN, find the k-th key by a radix select on 8-bit digits (two
  histogram passes for 16-bit keys, four for 32-bit), then collect the keys above it and
  the policy's ties in one walk.

Rows are addressed through their strides, so transposed or sliced score rows work as they are.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

KEY_BITS_OF = {torch.float32: 32, torch.float16: 16, torch.bfloat16: 16}
# Elements a program handles per step (rows) and per step of the topk candidates.
ROW_BLOCK = 2048
CANDIDATE_BLOCK = 1024
NUM_WARPS = 8


def select_rows(rows: torch.Tensor, width: int, prefer_large: bool) -> torch.Tensor:
    """The columns of each row's top ``width`` scores (``width < n``), unordered, int64."""
    count, n = rows.shape
    out = torch.empty(count, width, dtype=torch.int64, device=rows.device)
    if count == 0:
        return out
    key_bits = KEY_BITS_OF[rows.dtype]
    if key_bits == 32:
        candidates = rows.topk(width + 1, dim=-1, sorted=False)
        values, indices = candidates.values, candidates.indices
    else:  # the radix select needs no candidates; pass placeholders
        values, indices = rows[:, :1], out[:, :1]
    select_row[(count,)](
        rows,
        rows.stride(0),
        rows.stride(1),
        n,
        values,
        indices,
        values.stride(0),
        out,
        width,
        _negative_infinity_key(rows.dtype),
        ROW_BLOCK=ROW_BLOCK,
        CANDIDATE_BLOCK=CANDIDATE_BLOCK,
        KEY_BITS=key_bits,
        HAS_CANDIDATES=key_bits == 32,
        FROM_END=prefer_large,
        num_warps=NUM_WARPS,
    )
    return out


def _negative_infinity_key(dtype: torch.dtype) -> int:
    """The order key of -inf in this dtype (NaN takes it too)."""
    bits = torch.tensor(float("-inf"), dtype=dtype).view(_BITS_DTYPE[dtype]).item()
    return bits ^ ((1 << (KEY_BITS_OF[dtype] - 1)) - 1)


_BITS_DTYPE = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


@triton.jit
def order_key(x, neg_inf_key, KEY_BITS: tl.constexpr):
    """int64 keys ordering like the floats' bit patterns; NaN gets -inf's key."""
    if KEY_BITS == 16:
        bits = x.to(tl.int16, bitcast=True).to(tl.int64)
    else:
        bits = x.to(tl.int32, bitcast=True).to(tl.int64)
    key = bits ^ ((bits >> (KEY_BITS - 1)) & ((1 << (KEY_BITS - 1)) - 1))
    return tl.where(x != x, neg_inf_key, key)


@triton.jit
def candidate_keys(values_row, start, offsets, count, neg_inf_key, KEY_BITS: tl.constexpr):
    """Which of the candidates start + offsets exist (< count), their keys, which are NaN."""
    inside = start + offsets < count
    x = tl.load(values_row + start + offsets, mask=inside, other=0)
    return inside, order_key(x, neg_inf_key, KEY_BITS), inside & (x != x)


@triton.jit
def radix_kth(
    row_ptr, col_stride, n, width, neg_inf_key,
    ROW_BLOCK: tl.constexpr, KEY_BITS: tl.constexpr,
):  # fmt: skip
    """The row's width-th largest key, and how many keys equal to it are selected."""
    offsets = tl.arange(0, ROW_BLOCK).to(tl.int64)
    digits = tl.arange(0, 256)
    known_mask = tl.zeros((), tl.int64)
    known_bits = tl.zeros((), tl.int64)
    remaining = width  # rank of the k-th key among the keys matching the known bits
    for level in tl.static_range(KEY_BITS // 8):
        shift = KEY_BITS - 8 * (level + 1)
        # The top digit holds the sign: flip it so digits order like the keys.
        flip = 128 if level == 0 else 0
        histogram = tl.zeros((256,), tl.int32)
        for start in range(0, n, ROW_BLOCK):
            columns = start + offsets
            inside = columns < n
            x = tl.load(row_ptr + columns * col_stride, mask=inside, other=0)
            key = order_key(x, neg_inf_key, KEY_BITS)
            match = inside & ((key & known_mask) == known_bits)
            digit = (((key >> shift) & 255) ^ flip).to(tl.int32)
            # Lanes that do not match count in digit 0; they are taken off below.
            histogram += tl.histogram(tl.where(match, digit, 0), 256)
            misses = ROW_BLOCK - tl.sum(match.to(tl.int32), axis=0)
            histogram -= tl.where(digits == 0, misses, 0)
        at_or_above = tl.sum(histogram, axis=0) - tl.cumsum(histogram, axis=0) + histogram
        chosen = tl.max(tl.where(at_or_above >= remaining, digits, 0), axis=0)
        above = tl.sum(tl.where(digits == chosen, at_or_above - histogram, 0), axis=0)
        remaining -= above
        known_mask |= tl.full((), 255, tl.int64) << shift
        known_bits |= ((chosen ^ flip).to(tl.int64) & 255) << shift
    # known_bits is the key's two's complement in KEY_BITS bits: sign-extend it.
    sign = (known_bits >> (KEY_BITS - 1)) & 1
    return known_bits - (sign << KEY_BITS), remaining


@triton.jit
def collect(
    row_ptr, col_stride, n, out_row, kth, take_greater, greater_goal, first_tie_slot,
    ties_goal, neg_inf_key,
    ROW_BLOCK: tl.constexpr, KEY_BITS: tl.constexpr, FROM_END: tl.constexpr,
):  # fmt: skip
    """Walk the row (from the end with FROM_END): store keys above kth (if take_greater)
    in slots 0.., and the first ties_goal keys equal to kth from first_tie_slot on."""
    offsets = tl.arange(0, ROW_BLOCK).to(tl.int64)
    found_greater = tl.zeros((), tl.int32)
    found_ties = tl.zeros((), tl.int32)
    start = tl.zeros((), tl.int64)
    while ((found_ties < ties_goal) | (found_greater < greater_goal)) & (start < n):
        step = start + offsets
        if FROM_END:
            columns = n - 1 - step
        else:
            columns = step
        inside = step < n
        x = tl.load(row_ptr + columns * col_stride, mask=inside, other=0)
        key = order_key(x, neg_inf_key, KEY_BITS)
        greater = inside & (key > kth) & take_greater
        rank = found_greater + tl.cumsum(greater.to(tl.int32), axis=0)
        tl.store(out_row + rank - 1, columns, mask=greater)
        tie = inside & (key == kth)
        rank = found_ties + tl.cumsum(tie.to(tl.int32), axis=0)
        tl.store(out_row + first_tie_slot + rank - 1, columns, mask=tie & (rank <= ties_goal))
        found_greater += tl.sum(greater.to(tl.int32), axis=0)
        found_ties += tl.sum(tie.to(tl.int32), axis=0)
        start += ROW_BLOCK


@triton.jit
def select_row(
    rows_ptr, row_stride, col_stride, n, values_ptr, indices_ptr, candidate_stride, out_ptr,
    width, neg_inf_key,
    ROW_BLOCK: tl.constexpr, CANDIDATE_BLOCK: tl.constexpr, KEY_BITS: tl.constexpr,
    HAS_CANDIDATES: tl.constexpr, FROM_END: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    row_ptr = rows_ptr + row * row_stride
    out_row = out_ptr + row * width
    use_radix = 1
    if HAS_CANDIDATES:
        # The k+1 candidates hold every key above the k-th and at least one equal to it.
        # Float order and key order differ only at ±0.0 and NaN: those rows use the radix.
        values_row = values_ptr + row * candidate_stride
        indices_row = indices_ptr + row * candidate_stride
        offsets = tl.arange(0, CANDIDATE_BLOCK)
        lowest = tl.full((), 2**62, tl.int64)
        has_nan = tl.zeros((), tl.int32)
        for start in range(0, width + 1, CANDIDATE_BLOCK):
            inside, key, nan = candidate_keys(
                values_row, start, offsets, width + 1, neg_inf_key, KEY_BITS
            )
            lowest = tl.minimum(lowest, tl.min(tl.where(inside, key, 2**62), axis=0))
            has_nan = tl.maximum(has_nan, tl.max(nan.to(tl.int32), axis=0))
        # The k-th key is the lowest if it repeats, else the next lowest (with its count).
        lowest_count = tl.zeros((), tl.int32)
        next_lowest = tl.full((), 2**62, tl.int64)
        next_count = tl.zeros((), tl.int32)
        for start in range(0, width + 1, CANDIDATE_BLOCK):
            inside, key, _ = candidate_keys(
                values_row, start, offsets, width + 1, neg_inf_key, KEY_BITS
            )
            lowest_count += tl.sum((inside & (key == lowest)).to(tl.int32), axis=0)
            above = inside & (key > lowest)
            block_min = tl.min(tl.where(above, key, 2**62), axis=0)
            block_count = tl.sum((above & (key == block_min)).to(tl.int32), axis=0)
            next_count = tl.where(
                block_min < next_lowest,
                block_count,
                next_count + tl.where(block_min == next_lowest, block_count, 0),
            )
            next_lowest = tl.minimum(next_lowest, block_min)
        kth = tl.where(lowest_count > 1, lowest, next_lowest)
        greater = tl.where(lowest_count > 1, width + 1 - lowest_count, width - next_count)
        # +0.0 has key 0 and -0.0 key -1.
        use_radix = (has_nan > 0) | (kth == 0) | (kth == -1)
        if use_radix == 0:
            # Ties at the k-th key are all among the candidates when the (k+1)-th is
            # below it, and any -inf is padding: then the candidates' ties suffice.
            ties_in_candidates = (lowest < kth) | (kth == neg_inf_key)
            taken = tl.zeros((), tl.int32)
            ties_taken = tl.zeros((), tl.int32)
            for start in range(0, width + 1, CANDIDATE_BLOCK):
                inside, key, _ = candidate_keys(
                    values_row, start, offsets, width + 1, neg_inf_key, KEY_BITS
                )
                column = tl.load(indices_row + start + offsets, mask=inside, other=0)
                tie = tl.where(ties_in_candidates, inside & (key == kth), False)
                tie_rank = ties_taken + tl.cumsum(tie.to(tl.int32), axis=0)
                chosen = (inside & (key > kth)) | (tie & (tie_rank <= width - greater))
                rank = taken + tl.cumsum(chosen.to(tl.int32), axis=0)
                tl.store(out_row + rank - 1, column, mask=chosen)
                taken += tl.sum(chosen.to(tl.int32), axis=0)
                ties_taken += tl.sum(tie.to(tl.int32), axis=0)
            if taken < width:
                collect(
                    row_ptr, col_stride, n, out_row, kth, False, 0, taken, width - taken,
                    neg_inf_key, ROW_BLOCK, KEY_BITS, FROM_END,
                )  # fmt: skip
    if use_radix != 0:
        kth, ties = radix_kth(row_ptr, col_stride, n, width, neg_inf_key, ROW_BLOCK, KEY_BITS)
        collect(
            row_ptr, col_stride, n, out_row, kth, True, width - ties, width - ties, ties,
            neg_inf_key, ROW_BLOCK, KEY_BITS, FROM_END,
        )  # fmt: skip
