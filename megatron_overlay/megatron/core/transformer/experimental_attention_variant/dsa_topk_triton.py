# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""The torch backend's CUDA selection: one Triton program per row, exact for every tie policy.

Scores are ranked by order keys (the float's bit pattern with negatives flipped, so -0.0 <
+0.0; NaN ranks as -inf). Every row comes with ``torch.topk(k+1)``'s candidates, which hold
every key above the k-th and at least one equal to it. Each program finds the row's k-th
largest key from them and selects:

* a row whose k-th key is unique at the boundary (the usual case for float32 ReLU sums)
  takes the candidates as they are;
* a row with ties at a non-zero k-th score (16-bit rows nearly always, integer plateaus)
  keeps the candidates above it and walks the row once for the policy's ties, comparing
  bit patterns and stopping as soon as it has them;
* a row whose k-th score is ±0.0 (float order and key order disagree there) or that holds a
  NaN finds the k-th key by a radix select on 8-bit digits, then collects the keys above it
  and the policy's ties in one walk.

``select_rows_ordered`` then sorts the row's columns in the same program and writes the
final answer (ascending columns, -1 / -inf padding last); ``select_rows`` leaves them
unordered for ``dsa_topk._finalize`` (k above ``MAX_ORDERED_WIDTH``). Rows are addressed
through their strides, so transposed or sliced score rows work as they are.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

KEY_BITS_OF = {torch.float32: 32, torch.float16: 16, torch.bfloat16: 16}
# Elements a program handles per step: the radix select's passes, the tie walk, the topk
# candidates. Wider blocks cost registers, hence programs per multiprocessor.
ROW_BLOCK = 2048
WALK_BLOCK = 2048
CANDIDATE_BLOCK = 1024
NUM_WARPS = 8
# The in-program sort holds next_power_of_2(k) columns in registers: up to this k.
MAX_ORDERED_WIDTH = 8192
# Sorts after every real column (rows are shorter than 2**30): marks a padding slot.
PADDING_COLUMN: tl.constexpr = tl.constexpr(2**31 - 1)


def _compiled_for_nvidia() -> bool:
    """Whether kernels are compiled for NVIDIA GPUs: not run by Triton's interpreter
    (TRITON_INTERPRET, read when Triton is imported), not built for ROCm."""
    knobs = getattr(triton, "knobs", None)  # Triton 3.4 on
    if knobs is not None:
        interpreted = bool(knobs.runtime.interpret)
    else:
        interpreted = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")
    return not interpreted and torch.version.hip is None


# Only there: the collected candidates stored by inline PTX (store_pairs) and a register cap
# a thread (Geometry.registers: ptxas's option; Triton's AMD backend refuses the argument).
NVIDIA = _compiled_for_nvidia()
SCATTER_ASM: tl.constexpr = tl.constexpr(NVIDIA)


def handles(rows: torch.Tensor) -> bool:
    """Whether select_rows takes these rows (the walk's columns are int32)."""
    return rows.dtype in KEY_BITS_OF and rows.size(-1) < 2**30


def orders(rows: torch.Tensor, width: int) -> bool:
    """Whether select_rows_ordered takes these rows (width < n, as select_rows needs)."""
    return handles(rows) and width < rows.size(-1) and width <= MAX_ORDERED_WIDTH


def select_rows(rows: torch.Tensor, width: int, prefer_large: bool) -> torch.Tensor:
    """The columns of each row's top ``width`` scores (``width < n``), unordered, int32."""
    return _launch(rows, width, prefer_large, values=None)[1]


def select_rows_ordered(
    rows: torch.Tensor, width: int, prefer_large: bool
) -> Tuple[torch.Tensor, torch.Tensor]:
    """select_topk's answer for these rows: (values, int32 columns), ascending, padding last."""
    values = torch.empty(rows.size(0), width, dtype=rows.dtype, device=rows.device)
    return _launch(rows, width, prefer_large, values)


def _launch(
    rows: torch.Tensor, width: int, prefer_large: bool, values: Optional[torch.Tensor]
) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
    count, n = rows.shape
    out = torch.empty(count, width, dtype=torch.int32, device=rows.device)
    if count == 0:
        return values, out
    candidates = rows.topk(width + 1, dim=-1, sorted=False)
    select_row[(count,)](
        rows,
        rows.stride(0),
        rows.stride(1),
        n,
        candidates.values,
        candidates.indices,
        candidates.values.stride(0),
        out,
        out if values is None else values,
        width,
        _negative_infinity_key(rows.dtype),
        ROW_BLOCK=ROW_BLOCK,
        WALK_BLOCK=WALK_BLOCK,
        CANDIDATE_BLOCK=CANDIDATE_BLOCK,
        KEY_BITS=KEY_BITS_OF[rows.dtype],
        FROM_END=prefer_large,
        SORT_BLOCK=0 if values is None else triton.next_power_of_2(width),
        CONTIGUOUS=rows.stride(1) == 1,
        num_warps=NUM_WARPS,
    )
    return values, out


@functools.lru_cache(maxsize=None)
def _negative_infinity_key(dtype: torch.dtype) -> int:
    """The order key of -inf in this dtype (NaN takes it too)."""
    bits = torch.tensor(float("-inf"), dtype=dtype).view(_BITS_DTYPE[dtype]).item()
    return bits ^ ((1 << (KEY_BITS_OF[dtype] - 1)) - 1)


_BITS_DTYPE = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


@triton.jit
def raw_key(x, KEY_BITS: tl.constexpr):
    """int64 keys ordering like the floats' bit patterns (NaN beyond ±inf)."""
    if KEY_BITS == 16:
        bits = x.to(tl.int16, bitcast=True).to(tl.int64)
    else:
        bits = x.to(tl.int32, bitcast=True).to(tl.int64)
    return bits ^ ((bits >> (KEY_BITS - 1)) & ((1 << (KEY_BITS - 1)) - 1))


@triton.jit
def is_nan_key(key, neg_inf_key):
    """NaN keys lie beyond ±inf's (+inf's key is -neg_inf_key - 1). An integer test, since
    Triton's interpreter compares 16-bit floats by their bits (x != x fails there)."""
    return (key < neg_inf_key) | (key > -neg_inf_key - 1)


@triton.jit
def order_key(x, neg_inf_key, KEY_BITS: tl.constexpr):
    """int64 keys ordering like the floats' bit patterns; NaN gets -inf's key."""
    key = raw_key(x, KEY_BITS)
    return tl.where(is_nan_key(key, neg_inf_key), neg_inf_key, key)


@triton.jit
def candidate_keys(values_row, start, offsets, count, neg_inf_key, KEY_BITS: tl.constexpr):
    """Which of the candidates start + offsets exist (< count), their keys, which are NaN."""
    inside = start + offsets < count
    key = raw_key(tl.load(values_row + start + offsets, mask=inside, other=0), KEY_BITS)
    nan = is_nan_key(key, neg_inf_key)
    return inside, tl.where(nan, neg_inf_key, key), inside & nan


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
    row_ptr, col_stride, n, out_row, kth, greater_goal, ties_goal, neg_inf_key,
    ROW_BLOCK: tl.constexpr, KEY_BITS: tl.constexpr, FROM_END: tl.constexpr,
):  # fmt: skip
    """Walk the row (from the end with FROM_END): store the keys above kth in slots 0.., and
    the first ties_goal keys equal to kth from slot greater_goal on."""
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
        greater = inside & (key > kth)
        rank = found_greater + tl.cumsum(greater.to(tl.int32), axis=0)
        tl.store(out_row + rank - 1, columns.to(tl.int32), mask=greater)
        tie = inside & (key == kth)
        rank = found_ties + tl.cumsum(tie.to(tl.int32), axis=0)
        tl.store(
            out_row + greater_goal + rank - 1, columns.to(tl.int32), mask=tie & (rank <= ties_goal)
        )
        found_greater += tl.sum(greater.to(tl.int32), axis=0)
        found_ties += tl.sum(tie.to(tl.int32), axis=0)
        start += ROW_BLOCK


@triton.jit
def walk_block(
    row_ptr, col_stride, n, done, offsets, FROM_END: tl.constexpr, CONTIGUOUS: tl.constexpr
):
    """The int32 columns of the walk's block after `done` keys and which exist (blocks run
    from the row's end with FROM_END; columns ascend inside each block), and their scores."""
    if FROM_END:
        columns = (n - done - offsets.shape[0]).to(tl.int32) + offsets
    else:
        columns = done.to(tl.int32) + offsets
    inside = (columns >= 0) & (columns < n)
    if CONTIGUOUS:
        x = tl.load(row_ptr + columns, mask=inside, other=0)
    else:
        x = tl.load(row_ptr + columns.to(tl.int64) * col_stride, mask=inside, other=0)
    return columns, inside, x


@triton.jit
def collect_ties(
    row_ptr, col_stride, n, out_row, kth, first_slot, goal,
    WALK_BLOCK: tl.constexpr, KEY_BITS: tl.constexpr, FROM_END: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    """Store the first goal columns whose score has the bit pattern of key kth (from the end
    with FROM_END) in slots first_slot... The row holds no NaN and kth is not ±0.0, so a bit
    compare is the key compare. The next block is loaded while this one is scanned."""
    kth_bits = kth ^ ((kth >> (KEY_BITS - 1)) & ((1 << (KEY_BITS - 1)) - 1))  # an involution
    if KEY_BITS == 16:
        kth_bits = kth_bits.to(tl.int16)
    else:
        kth_bits = kth_bits.to(tl.int32)
    offsets = tl.arange(0, WALK_BLOCK)
    found = tl.zeros((), tl.int32)
    done = tl.zeros((), tl.int32)
    x = walk_block(row_ptr, col_stride, n, done, offsets, FROM_END, CONTIGUOUS)[2]
    while (found < goal) & (done < n):
        next_x = walk_block(
            row_ptr, col_stride, n, done + WALK_BLOCK, offsets, FROM_END, CONTIGUOUS
        )[2]
        if FROM_END:
            columns = (n - done - WALK_BLOCK).to(tl.int32) + offsets
        else:
            columns = done + offsets
        if KEY_BITS == 16:
            bits = x.to(tl.int16, bitcast=True)
        else:
            bits = x.to(tl.int32, bitcast=True)
        tie = ((columns >= 0) & (columns < n) & (bits == kth_bits)).to(tl.int32)
        before = tl.cumsum(tie, axis=0)
        ties = tl.sum(tie, axis=0)
        if FROM_END:
            rank = found + ties - before + tie  # counted from the block's end
        else:
            rank = found + before
        chosen = (tie > 0) & (rank <= goal)
        tl.store(out_row + first_slot + rank - 1, columns, mask=chosen)
        found += ties
        done += WALK_BLOCK
        x = next_x


@triton.jit
def write_ordered(
    row_ptr, col_stride, out_row, values_row, width, real, SORT_BLOCK: tl.constexpr,
    column_offset=0,
):  # fmt: skip
    """Reorder the row's width selected columns ascending; slots from real on are padding
    (-1, value -inf) and go last. Columns are written plus column_offset."""
    slots = tl.arange(0, SORT_BLOCK)
    tl.debug_barrier()  # the walks' stores are visible to every thread of the program
    columns = tl.load(out_row + slots, mask=slots < real, other=PADDING_COLUMN)
    columns = tl.sort(columns)
    tl.debug_barrier()  # every thread has read its slots before any is overwritten
    store_ordered(
        row_ptr, col_stride, out_row, values_row, columns, width, column_offset, SORT_BLOCK
    )


@triton.jit
def store_ordered(
    row_ptr, col_stride, out_row, values_row, columns, width, column_offset,
    SORT_BLOCK: tl.constexpr,
):  # fmt: skip
    """Write the row's ascending columns with their scores; the PADDING_COLUMN slots (last)
    as -1 / -inf. Columns are written plus column_offset."""
    slots = tl.arange(0, SORT_BLOCK)
    kept = columns != PADDING_COLUMN
    x = tl.load(row_ptr + columns.to(tl.int64) * col_stride, mask=kept, other=float("-inf"))
    tl.store(out_row + slots, tl.where(kept, columns + column_offset, -1), mask=slots < width)
    tl.store(values_row + slots, x, mask=slots < width)


def finalizes(rows: torch.Tensor, width: int) -> bool:
    """Whether finalize_rows takes these rows and this many selected columns a row."""
    return handles(rows) and 0 < width <= MAX_ORDERED_WIDTH


def finalize_rows(rows: torch.Tensor, indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``dsa_topk._finalize`` in one program per row, for columns another kernel selected:
    (values, int32 columns) ascending, slots whose score is -inf or NaN (or whose column is
    outside the row) last as -1 / -inf."""
    count, width = indices.shape
    values = torch.empty(count, width, dtype=rows.dtype, device=rows.device)
    out = torch.empty(count, width, dtype=torch.int32, device=rows.device)
    if count == 0:
        return values, out
    finalize_row[(count,)](
        rows,
        rows.stride(0),
        rows.stride(1),
        rows.size(1),
        indices,
        indices.stride(0),
        indices.stride(1),
        out,
        values,
        width,
        _negative_infinity_key(rows.dtype),
        KEY_BITS=KEY_BITS_OF[rows.dtype],
        SORT_BLOCK=triton.next_power_of_2(width),
        num_warps=NUM_WARPS,
    )
    return values, out


@triton.jit
def larger(a, b):
    return tl.maximum(a, b)


@triton.jit
def finalize_row(
    rows_ptr, row_stride, col_stride, n, indices_ptr, index_row_stride, index_col_stride,
    out_ptr, values_ptr, width, neg_inf_key, KEY_BITS: tl.constexpr, SORT_BLOCK: tl.constexpr,
):  # fmt: skip
    """One row of finalize_rows: its selected scores read once, their columns sorted with the
    -inf / NaN slots as padding."""
    row = tl.program_id(0).to(tl.int64)
    row_ptr = rows_ptr + row * row_stride
    slots = tl.arange(0, SORT_BLOCK)
    given = tl.load(
        indices_ptr + row * index_row_stride + slots.to(tl.int64) * index_col_stride,
        mask=slots < width,
        other=-1,
    )
    inside = (given >= 0) & (given < n)  # before the int32 cast: 2**32 + 5 is not column 5
    columns = given.to(tl.int32)
    x = tl.load(row_ptr + columns.to(tl.int64) * col_stride, mask=inside, other=float("-inf"))
    real = inside & (order_key(x, neg_inf_key, KEY_BITS) > neg_inf_key)  # not -inf, not NaN
    columns = tl.where(real, columns, PADDING_COLUMN)
    # Selections often come ascending already (FlashInfer's deterministic mode): a running
    # maximum, much cheaper than the sort, tells.
    if tl.min((tl.associative_scan(columns, 0, larger) == columns).to(tl.int32), 0) == 0:
        columns = tl.sort(columns)
    out_row = out_ptr + row * width
    store_ordered(
        row_ptr, col_stride, out_row, values_ptr + row * width, columns, width, 0, SORT_BLOCK
    )


@triton.jit
def select_row(
    rows_ptr, row_stride, col_stride, n, values_ptr, indices_ptr, candidate_stride, out_ptr,
    out_values_ptr, width, neg_inf_key,
    ROW_BLOCK: tl.constexpr, WALK_BLOCK: tl.constexpr, CANDIDATE_BLOCK: tl.constexpr,
    KEY_BITS: tl.constexpr, FROM_END: tl.constexpr, SORT_BLOCK: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    row_ptr = rows_ptr + row * row_stride
    out_row = out_ptr + row * width
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
        # Ties at the k-th key are all among the candidates when the (k+1)-th is below it,
        # and any -inf is padding: then the candidates' ties suffice.
        # Keys above kth go to slots 0.., ties to slots greater.. (padding stays last).
        ties_in_candidates = (lowest < kth) | (kth == neg_inf_key)
        greater_taken = tl.zeros((), tl.int32)
        ties_taken = tl.zeros((), tl.int32)
        for start in range(0, width + 1, CANDIDATE_BLOCK):
            inside, key, _ = candidate_keys(
                values_row, start, offsets, width + 1, neg_inf_key, KEY_BITS
            )
            column = tl.load(indices_row + start + offsets, mask=inside, other=0).to(tl.int32)
            above = inside & (key > kth)
            rank = greater_taken + tl.cumsum(above.to(tl.int32), axis=0)
            tl.store(out_row + rank - 1, column, mask=above)
            tie = tl.where(ties_in_candidates, inside & (key == kth), False)
            rank = ties_taken + tl.cumsum(tie.to(tl.int32), axis=0)
            tl.store(out_row + greater + rank - 1, column, mask=tie & (rank <= width - greater))
            greater_taken += tl.sum(above.to(tl.int32), axis=0)
            ties_taken += tl.sum(tie.to(tl.int32), axis=0)
        ties_taken = tl.minimum(ties_taken, width - greater)
        if ties_taken < width - greater:
            collect_ties(
                row_ptr, col_stride, n, out_row, kth, greater + ties_taken,
                width - greater - ties_taken, WALK_BLOCK, KEY_BITS, FROM_END, CONTIGUOUS,
            )  # fmt: skip
    else:
        kth, ties = radix_kth(row_ptr, col_stride, n, width, neg_inf_key, ROW_BLOCK, KEY_BITS)
        greater = width - ties
        collect(
            row_ptr, col_stride, n, out_row, kth, greater, ties, neg_inf_key,
            ROW_BLOCK, KEY_BITS, FROM_END,
        )  # fmt: skip
    if SORT_BLOCK > 0:
        # Keys at -inf (NaN too) are padding: only the keys above the k-th are real then.
        real = tl.where(kth == neg_inf_key, greater, width)
        write_ordered(
            row_ptr, col_stride, out_row, out_values_ptr + row * width, width, real, SORT_BLOCK
        )


# =====================================================================================
# The filtered radix select: one pass over each row, no torch.topk
# =====================================================================================
#
# Each program owns one row (or the row's visible segment [start, end) of columns):
#
# 1. Threshold. A sample of the segment (SAMPLE_CHUNKS evenly spaced runs of SAMPLE_CHUNK
#    scores) gives a key below which about ``target`` scores of the whole segment are
#    expected to lie above; a segment of at most CAPACITY scores takes every finite score.
# 2. Filter. One pass over the segment appends every score whose order key is at or above the
#    threshold, with its column, to the row's candidate buffer (CAPACITY slots), in column
#    order (a block-wise prefix sum, no atomics).
# 3. Select. When the candidates hold the k-th score (at least k of them, at most CAPACITY;
#    or fewer than k when the threshold admitted every finite score), a radix search over
#    the key bits (two bits a step, in registers) finds the exact k-th key, every candidate
#    above it is taken and the policy's ties (first or last in column order) fill the rest.
#    The candidates are in column order, so the selection is written ascending, -1 / -inf
#    padding last, with no sort.
# 4. Otherwise (the sample misjudged the row, or ties at the k-th score overflow the buffer)
#    the exact radix select on 8-bit digits over the whole segment runs, then the ordered
#    write, as in ``select_row``.
#
# Scores outside a row's segment are never read: they count as -inf (masked), so bounded
# rows need no masking pass before selection.

# Candidate slots per row: CAPACITY_FACTOR x next_power_of_2(k), at least MIN_CAPACITY.
# With a sample of 8192 scores of a 128K row the candidate count has a relative spread of
# about 7% around its target (k times sqrt(2)) on iid rows, far inside [k, 2k]; the
# segmented select samples 4096 (about 10%) and retries the rows it misjudges. 8 warps,
# 4096-score steps and 4096 slots keep the
# kernel at 128 registers without spills for sm_90 (ptxas): two programs per multiprocessor.
CAPACITY_FACTOR = 2
MIN_CAPACITY = 1024
# Widths up to this take the filtered select (the candidate buffer lives in registers).
MAX_FILTER_WIDTH = 4096
# Rows longer than this keep the topk(k+1) kernel: on the H200, 16 rows of 1M scores took
# 6.8 ms filtered against 0.33 ms (a sample of 8192 judges such rows loosely, and a row the
# sample misjudges falls back to one program's radix select over a million scores), while
# 4096 rows of 128K took 2.0 ms against 6.7 ms.
MAX_FILTER_ROW = 1 << 18
SAMPLE_CHUNKS = 32
SAMPLE_CHUNK = 256
FILTER_BLOCK = 4096
FILTER_WARPS = 8
# The striped filter: a one-warp program per STRIPE_SCORES scores of a row (at most
# MAX_STRIPES a row), CHUNK scores a step; STRIPE_SCORES = 0 takes one program per row.
STRIPE_SCORES = 16384
MAX_STRIPES = 64
STRIPE_CHUNK = 512
MIN_STRIPE_SLOTS = 256
PACK_SLOTS = 512


def filters(rows: torch.Tensor, width: int) -> bool:
    """Whether select_rows_filtered takes these rows (where it beats the topk(k+1) kernel)."""
    return handles(rows) and 0 < width <= MAX_FILTER_WIDTH and rows.size(-1) <= MAX_FILTER_ROW


def capacity_for(width: int) -> int:
    return max(MIN_CAPACITY, CAPACITY_FACTOR * triton.next_power_of_2(width))


def stripes_for(n: int) -> int:
    """Programs (one warp each) that filter a row of n scores: about STRIPE_SCORES each, at
    most MAX_STRIPES; 0 takes the one-program-per-row kernel."""
    if STRIPE_SCORES <= 0:
        return 0
    return max(1, min(MAX_STRIPES, triton.cdiv(n, STRIPE_SCORES)))


def scratch_slots(width: int, n: int) -> int:
    """int32 (key, column) pairs of candidate scratch a row takes."""
    if SEGMENTED and SPLIT:
        return split_scratch_slots(width, n)
    if SEGMENTED:
        return segmented_scratch_slots(width)
    capacity = capacity_for(width)
    stripes = stripes_for(n)
    return capacity if stripes == 0 else stripes * stripe_slots(capacity, stripes)


def stripe_slots(capacity: int, stripes: int) -> int:
    """Slots of one stripe's buffer: twice its even share of the capacity (at least
    MIN_STRIPE_SLOTS), so a stripe may hold more than its share of the row's candidates."""
    return max(MIN_STRIPE_SLOTS, triton.next_power_of_2(triton.cdiv(2 * capacity, stripes)))


def select_rows_filtered(
    rows: torch.Tensor,
    width: int,
    prefer_large: bool,
    starts: Optional[torch.Tensor] = None,
    ends: Optional[torch.Tensor] = None,
    column_offset: int = 0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(values, int32 columns) of each row's top ``width`` scores, ascending, -1 / -inf
    padding last: select_topk's answer, which ``width`` may exceed the row (padding).

    With ``starts`` / ``ends`` (one per row, int32 or int64) only columns in ``[start, end)``
    of a row are visible; the rest count as -inf and are not read. Returned columns are
    ``column_offset`` plus the column in ``rows``.
    """
    count, n = rows.shape
    values = torch.empty(count, width, dtype=rows.dtype, device=rows.device)
    out = torch.empty(count, width, dtype=torch.int32, device=rows.device)
    if count == 0 or width == 0:
        return values, out
    capacity = capacity_for(width)
    bounded = starts is not None
    if bounded:
        starts = starts.contiguous()
        ends = ends.contiguous()
    # The candidates expected above the threshold: midway, in ratio, between k and capacity.
    target = max(1, int((width * capacity) ** 0.5))
    neg_inf_key = _negative_infinity_key(rows.dtype)
    row_args = (rows, rows.stride(0), rows.stride(1), n)
    bound_args = (starts if bounded else out, ends if bounded else out)
    common = dict(
        HAS_BOUNDS=bounded, KEY_BITS=KEY_BITS_OF[rows.dtype], CONTIGUOUS=rows.stride(1) == 1
    )
    if SEGMENTED:
        bounds = (starts, ends) if bounded else None
        if SPLIT:
            return _select_split(rows, width, prefer_large, bounds, column_offset, values, out)
        return _select_segmented(rows, width, prefer_large, bounds, column_offset, values, out)
    stripes = stripes_for(n)
    if stripes == 0:
        scratch = torch.empty(count, 2, capacity, dtype=torch.int32, device=rows.device)
        filter_select_row[(count,)](
            *row_args, *bound_args, column_offset, scratch, out, values, width, target,
            neg_inf_key, CAPACITY=capacity, SAMPLE_CHUNKS=SAMPLE_CHUNKS,
            SAMPLE_CHUNK=SAMPLE_CHUNK, BLOCK=FILTER_BLOCK, ROW_BLOCK=ROW_BLOCK,
            FROM_END=prefer_large, SORT_BLOCK=triton.next_power_of_2(width),
            num_warps=FILTER_WARPS, **common,
        )  # fmt: skip
        return values, out
    slots = stripe_slots(capacity, stripes)
    thresholds = torch.empty(count, dtype=torch.int32, device=rows.device)
    found = torch.empty(count, stripes, dtype=torch.int32, device=rows.device)
    scratch = torch.empty(count, 2, stripes * slots, dtype=torch.int32, device=rows.device)
    row_thresholds[(count,)](
        *row_args, *bound_args, thresholds, target, neg_inf_key, CAPACITY=capacity,
        SAMPLE_CHUNKS=SAMPLE_CHUNKS, SAMPLE_CHUNK=SAMPLE_CHUNK, num_warps=FILTER_WARPS,
        **common,
    )  # fmt: skip
    filter_stripes[(count, stripes)](
        *row_args, *bound_args, thresholds, found, scratch, neg_inf_key, stripes, slots,
        CHUNK=STRIPE_CHUNK, num_warps=1, **common,
    )  # fmt: skip
    select_from_stripes[(count,)](
        *row_args, *bound_args, column_offset, thresholds, found, scratch, out, values, width,
        neg_inf_key, stripes, slots, MAX_STRIPES=triton.next_power_of_2(MAX_STRIPES),
        PACK=PACK_SLOTS, CAPACITY=capacity, ROW_BLOCK=ROW_BLOCK, FROM_END=prefer_large,
        SORT_BLOCK=triton.next_power_of_2(width), num_warps=FILTER_WARPS, **common,
    )  # fmt: skip
    return values, out


@triton.jit
def key32(x, neg_inf_key, KEY_BITS: tl.constexpr):
    """int32 keys ordering like the floats' bit patterns; NaN gets -inf's key."""
    bits = score_bits(x, KEY_BITS)
    key = bits ^ ((bits >> (KEY_BITS - 1)) & ((1 << (KEY_BITS - 1)) - 1))
    nan = (key < neg_inf_key) | (key > -neg_inf_key - 1)
    return tl.where(nan, neg_inf_key, key)


@triton.jit
def key_to_score(key, dtype: tl.constexpr, KEY_BITS: tl.constexpr):
    """The score whose key32 is ``key`` (the key transform is an involution on the bits)."""
    bits = key ^ ((key >> (KEY_BITS - 1)) & ((1 << (KEY_BITS - 1)) - 1))
    if KEY_BITS == 16:
        score = bits.to(tl.int16).to(dtype, bitcast=True)
    else:
        score = bits.to(dtype, bitcast=True)
    return score


@triton.jit
def add_pairs(a, b, c, d):
    return a + c, b + d


@triton.jit
def search_step(keys, valid, rank, lo, hi):
    """One step of the search for the largest key v in [lo, hi] with #(valid & keys >= v) >=
    rank, lo qualifying: split the interval in four and count three thresholds in one
    reduction; returns the new [lo, hi]. ``keys`` are int32 and the thresholds lie in
    [lo, hi], so they compare in 32 bits; the counts (below 2**16) travel as 16-bit fields,
    two in one int32 and the third in another."""
    span = hi - lo
    m1 = lo + (span + 3) // 4
    m2 = lo + (span + 1) // 2
    m3 = lo + (3 * span + 3) // 4
    low = (valid & (keys >= m1.to(tl.int32))).to(tl.int32) + (
        (valid & (keys >= m2.to(tl.int32))).to(tl.int32) << 16
    )
    high = (valid & (keys >= m3.to(tl.int32))).to(tl.int32)
    low, c3 = tl.reduce((low, high), 0, add_pairs)
    c1 = low & 0xFFFF
    c2 = low >> 16
    new_lo = tl.where(c3 >= rank, m3, tl.where(c2 >= rank, m2, tl.where(c1 >= rank, m1, lo)))
    hi = tl.where(
        c3 >= rank, hi, tl.where(c2 >= rank, m3 - 1, tl.where(c1 >= rank, m2 - 1, m1 - 1))
    )
    return new_lo, hi


@triton.jit
def search_key(keys, valid, rank, lo, hi, ITERATIONS: tl.constexpr):
    """The largest key v in [lo, hi] with #(valid & keys >= v) >= rank, given that lo
    qualifies, in ITERATIONS steps of search_step: 16 steps cover 32-bit keys; fewer steps
    return a qualifying lower bound."""
    lo = lo + tl.zeros((), tl.int64)
    hi = hi + tl.zeros((), tl.int64)
    for _ in range(ITERATIONS):
        lo, hi = search_step(keys, valid, rank, lo, hi)
    return lo


@triton.jit
def search_range(keys, valid, rank, lo, hi):
    """search_key to the end: as many steps as the span [lo, hi] needs."""
    lo = lo + tl.zeros((), tl.int64)
    hi = hi + tl.zeros((), tl.int64)
    while lo < hi:
        lo, hi = search_step(keys, valid, rank, lo, hi)
    return lo


@triton.jit
def load_segment(seg_ptr, col_stride, start, length, offsets, CONTIGUOUS: tl.constexpr):
    """Scores at columns start + offsets of the segment (0 past its end), and which exist."""
    columns = start + offsets
    inside = columns < length
    if CONTIGUOUS:
        x = tl.load(seg_ptr + columns, mask=inside, other=0)
    else:
        x = tl.load(seg_ptr + columns.to(tl.int64) * col_stride, mask=inside, other=0)
    return x


@triton.jit
def sample_threshold(
    seg_ptr, col_stride, length, target, neg_inf_key,
    SAMPLE_CHUNKS: tl.constexpr, SAMPLE_CHUNK: tl.constexpr, KEY_BITS: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    """A key about ``target`` scores of the segment lie at or above (length > the sample)."""
    SAMPLE: tl.constexpr = SAMPLE_CHUNKS * SAMPLE_CHUNK
    i = tl.arange(0, SAMPLE)
    spacing = (length - SAMPLE_CHUNK) // (SAMPLE_CHUNKS - 1)
    columns = (i // SAMPLE_CHUNK) * spacing + (i % SAMPLE_CHUNK)
    x = load_segment(seg_ptr, col_stride, 0, length, columns, CONTIGUOUS)
    keys = key32(x, neg_inf_key, KEY_BITS)
    # The sample's rank-th largest key, rank in proportion to target.
    rank = tl.maximum((target.to(tl.int64) * SAMPLE) // length, 1)
    everything = keys == keys
    # 8 steps fix the top 16 key bits: a threshold at most that far below the rank-th key.
    return search_key(keys, everything, rank, -(1 << (KEY_BITS - 1)), (1 << (KEY_BITS - 1)) - 1, 8)


@triton.jit
def filter_candidates(
    seg_ptr, col_stride, length, threshold, keys_row, columns_row, neg_inf_key,
    CAPACITY: tl.constexpr, BLOCK: tl.constexpr, KEY_BITS: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    """Append the segment's keys >= threshold and their columns, in column order, to the
    candidate buffer (the first CAPACITY of them); return how many there are."""
    offsets = tl.arange(0, BLOCK)
    found = tl.zeros((), tl.int32)
    x = load_segment(seg_ptr, col_stride, 0, length, offsets, CONTIGUOUS)
    for start in range(0, length, BLOCK):
        next_x = load_segment(seg_ptr, col_stride, start + BLOCK, length, offsets, CONTIGUOUS)
        columns = start + offsets
        key = key32(x, neg_inf_key, KEY_BITS)
        hit = (columns < length) & (key >= threshold)
        hits = tl.sum(hit.to(tl.int32), axis=0)
        if hits > 0:
            slot = found + tl.cumsum(hit.to(tl.int32), axis=0) - 1
            keep = hit & (slot < CAPACITY)
            tl.store(keys_row + slot, key, mask=keep)
            tl.store(columns_row + slot, columns, mask=keep)
        found += hits
        x = next_x
    return found


@triton.jit
def row_segment(
    rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, row, HAS_BOUNDS: tl.constexpr
):  # fmt: skip
    """The row's visible segment: its first column, length and pointer."""
    if HAS_BOUNDS:
        first = tl.minimum(tl.maximum(tl.load(starts_ptr + row).to(tl.int64), 0), n)
        last = tl.minimum(tl.maximum(tl.load(ends_ptr + row).to(tl.int64), first), n)
    else:
        first = tl.zeros((), tl.int64)
        last = tl.zeros((), tl.int64) + n
    length = (last - first).to(tl.int32)
    return first, length, rows_ptr + row * row_stride + first * col_stride


@triton.jit
def threshold_for(
    seg_ptr, col_stride, length, target, neg_inf_key, CAPACITY: tl.constexpr,
    SAMPLE_CHUNKS: tl.constexpr, SAMPLE_CHUNK: tl.constexpr, KEY_BITS: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    """The candidates' threshold key: sampled on long segments, every finite score on
    segments of at most CAPACITY."""
    lowest_real = neg_inf_key + 1  # the key of the lowest finite score
    threshold = tl.zeros((), tl.int64) + lowest_real
    if length > CAPACITY:
        threshold = sample_threshold(
            seg_ptr, col_stride, length, target, neg_inf_key,
            SAMPLE_CHUNKS, SAMPLE_CHUNK, KEY_BITS, CONTIGUOUS,
        )  # fmt: skip
        threshold = tl.maximum(threshold, lowest_real)
    return threshold.to(tl.int32)


@triton.jit
def select_candidates(
    keys_row, columns_row, found, threshold, neg_inf_key, width, out_row, values_row,
    column_offset, values_dtype: tl.constexpr, CAPACITY: tl.constexpr,
    KEY_BITS: tl.constexpr, FROM_END: tl.constexpr,
):  # fmt: skip
    """The row's answer from its ``found`` candidates (in column order, at most CAPACITY):
    the exact k-th key, every candidate above it, the policy's ties; written ascending with
    -1 / -inf padding (every finite candidate when there are fewer than ``width``: the
    caller passes fewer only where every finite score is one). Returns whether that answer
    is the row's: not where ``width`` candidates or more hold a NaN (the segmented select's
    collecting passes admit positive NaN, run_hits), which the caller's radix select ranks
    as -inf; it then writes nothing."""
    positive_infinity_key = -neg_inf_key - 1  # NaN keys lie above it
    slots = tl.arange(0, CAPACITY)
    valid = slots < found
    keys = tl.load(keys_row + slots, mask=valid, other=-(2**31))
    columns = tl.load(columns_row + slots, mask=valid, other=0)
    top = tl.max(tl.where(valid, keys, threshold), axis=0)
    finite = top <= positive_infinity_key  # no NaN among the candidates
    answered = finite | (found < width)
    if finite & (found >= width):
        kth = search_range(keys, valid, width, threshold, top)
        greater = valid & (keys > kth)
        tie = (valid & (keys == kth)).to(tl.int32)
        need = width - tl.sum(greater.to(tl.int32), axis=0)
        rank = tl.cumsum(tie, axis=0)
        if FROM_END:
            rank = tl.sum(tie, axis=0) - rank + tie
        chosen = greater | ((tie > 0) & (rank <= need))
        real = width
    else:
        # Every finite candidate (NaN ranks as -inf: padding); where not answered, nothing
        # is written (no candidate chosen, no padding): the row's slots are the radix's.
        chosen = valid & (keys <= tl.where(answered, positive_infinity_key, neg_inf_key))
        real = tl.where(answered, tl.sum(chosen.to(tl.int32), axis=0), width)
    slot = tl.cumsum(chosen.to(tl.int32), axis=0) - 1
    tl.store(out_row + slot, columns + column_offset, mask=chosen)
    tl.store(values_row + slot, key_to_score(keys, values_dtype, KEY_BITS), mask=chosen)
    padding = (slots >= real) & (slots < width)
    tl.store(out_row + slots, tl.full((CAPACITY,), -1, tl.int32), mask=padding)
    # Made in float32 and cast: Triton 3.7's interpreter cannot make a bfloat16 constant.
    negative_infinity = tl.full((CAPACITY,), float("-inf"), tl.float32).to(values_dtype)
    tl.store(values_row + slots, negative_infinity, mask=padding)
    return answered


@triton.jit
def select_by_radix(
    seg_ptr, col_stride, length, width, out_row, values_row, column_offset, neg_inf_key,
    ROW_BLOCK: tl.constexpr, KEY_BITS: tl.constexpr, FROM_END: tl.constexpr,
    SORT_BLOCK: tl.constexpr,
):  # fmt: skip
    """The row's answer by the exact radix select over the whole segment (length >= width;
    equal where every score was a candidate and one a NaN, select_candidates)."""
    kth, ties = radix_kth(seg_ptr, col_stride, length, width, neg_inf_key, ROW_BLOCK, KEY_BITS)
    greater = width - ties
    collect(
        seg_ptr, col_stride, length, out_row, kth, greater, ties, neg_inf_key,
        ROW_BLOCK, KEY_BITS, FROM_END,
    )  # fmt: skip
    real = tl.where(kth == neg_inf_key, greater, width)
    write_ordered(
        seg_ptr, col_stride, out_row, values_row, width, real, SORT_BLOCK, column_offset
    )  # fmt: skip


# Row lengths, bounds and widths vary from block to block: one compiled kernel for all.
@triton.jit(
    do_not_specialize=[
        "row_stride", "col_stride", "n", "column_offset", "width", "target", "neg_inf_key",
    ]
)  # fmt: skip
def filter_select_row(
    rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, column_offset, scratch_ptr,
    out_ptr, out_values_ptr, width, target, neg_inf_key,
    HAS_BOUNDS: tl.constexpr, CAPACITY: tl.constexpr, SAMPLE_CHUNKS: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr, BLOCK: tl.constexpr, ROW_BLOCK: tl.constexpr,
    KEY_BITS: tl.constexpr, FROM_END: tl.constexpr, SORT_BLOCK: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    """One program per row: threshold, filter pass, select (or the full radix select)."""
    row = tl.program_id(0).to(tl.int64)
    first, length, seg_ptr = row_segment(
        rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, row, HAS_BOUNDS
    )
    out_row = out_ptr + row * width
    values_row = out_values_ptr + row * width
    keys_row = scratch_ptr + row * (2 * CAPACITY)
    columns_row = keys_row + CAPACITY
    threshold = threshold_for(
        seg_ptr, col_stride, length, target, neg_inf_key, CAPACITY, SAMPLE_CHUNKS,
        SAMPLE_CHUNK, KEY_BITS, CONTIGUOUS,
    )  # fmt: skip
    found = filter_candidates(
        seg_ptr, col_stride, length, threshold, keys_row, columns_row, neg_inf_key,
        CAPACITY, BLOCK, KEY_BITS, CONTIGUOUS,
    )  # fmt: skip
    offset = column_offset + first.to(tl.int32)
    every_finite = threshold == neg_inf_key + 1
    if (found <= CAPACITY) & ((found >= width) | every_finite):
        select_candidates(
            keys_row, columns_row, found, threshold, neg_inf_key, width, out_row, values_row,
            offset, out_values_ptr.dtype.element_ty, CAPACITY, KEY_BITS, FROM_END,
        )  # fmt: skip
    else:
        select_by_radix(
            seg_ptr, col_stride, length, width, out_row, values_row, offset, neg_inf_key,
            ROW_BLOCK, KEY_BITS, FROM_END, SORT_BLOCK,
        )  # fmt: skip


# The striped select: three launches. row_thresholds (a program per row) samples each row;
# filter_stripes (a one-warp program per stripe of a row, up to MAX_STRIPES a row) appends its stripe's
# candidates to the stripe's own buffer with warp-level prefix sums, so the streaming pass has
# no block-wide barrier; select_from_stripes (a program per row) packs the stripes' buffers
# in stripe order (hence column order) and selects, or runs the full radix select when a
# stripe overflowed or the threshold missed.


@triton.jit(do_not_specialize=["row_stride", "col_stride", "n", "target", "neg_inf_key"])
def row_thresholds(
    rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, thresholds_ptr, target,
    neg_inf_key, HAS_BOUNDS: tl.constexpr, CAPACITY: tl.constexpr,
    SAMPLE_CHUNKS: tl.constexpr, SAMPLE_CHUNK: tl.constexpr, KEY_BITS: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    _, length, seg_ptr = row_segment(
        rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, row, HAS_BOUNDS
    )
    threshold = threshold_for(
        seg_ptr, col_stride, length, target, neg_inf_key, CAPACITY, SAMPLE_CHUNKS,
        SAMPLE_CHUNK, KEY_BITS, CONTIGUOUS,
    )  # fmt: skip
    tl.store(thresholds_ptr + row, threshold)


# Stripe counts and buffer sizes follow the row length: runtime values, one compile for all.
@triton.jit(do_not_specialize=["row_stride", "col_stride", "n", "neg_inf_key", "stripes", "slots"])
def filter_stripes(
    rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, thresholds_ptr, found_ptr,
    scratch_ptr, neg_inf_key, stripes, slots, HAS_BOUNDS: tl.constexpr, CHUNK: tl.constexpr,
    KEY_BITS: tl.constexpr, CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    """Stripe s of a row (the s-th of ``stripes`` equal runs of its segment): append its
    scores whose key is at or above the row's threshold, with their columns, to the stripe's
    ``slots`` slots in column order; store how many there are (all of them, also past
    ``slots``)."""
    row = tl.program_id(0).to(tl.int64)
    stripe = tl.program_id(1)
    _, length, seg_ptr = row_segment(
        rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, row, HAS_BOUNDS
    )
    threshold = tl.load(thresholds_ptr + row)
    positive_infinity_key = -neg_inf_key - 1  # NaN keys lie beyond ±inf's
    share = tl.cdiv(length, stripes)
    begin = stripe * share
    end = tl.minimum(begin + share, length)
    keys_row = scratch_ptr + row * (2 * stripes * slots) + stripe * slots
    columns_row = keys_row + stripes * slots
    offsets = tl.arange(0, CHUNK)
    found = tl.zeros((), tl.int32)
    x = load_segment(seg_ptr, col_stride, begin, end, offsets, CONTIGUOUS)
    for start in range(begin, end, CHUNK):
        next_x = load_segment(seg_ptr, col_stride, start + CHUNK, end, offsets, CONTIGUOUS)
        columns = start + offsets
        bits = score_bits(x, KEY_BITS)
        key = bits ^ ((bits >> (KEY_BITS - 1)) & ((1 << (KEY_BITS - 1)) - 1))
        # The threshold is above -inf's key, so -inf and negative NaN never pass; positive
        # NaN keys lie above +inf's.
        hit = (columns < end) & (key >= threshold) & (key <= positive_infinity_key)
        hits = hit.to(tl.int32)
        slot = found + tl.cumsum(hits, axis=0) - 1
        keep = hit & (slot < slots)
        tl.store(keys_row + slot, key, mask=keep)
        tl.store(columns_row + slot, columns, mask=keep)
        found += tl.sum(hits, axis=0)
        x = next_x
    tl.store(found_ptr + row * stripes + stripe, found)


@triton.jit(
    do_not_specialize=[
        "row_stride", "col_stride", "n", "column_offset", "width", "neg_inf_key", "stripes",
        "slots",
    ]
)  # fmt: skip
def select_from_stripes(
    rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, column_offset, thresholds_ptr,
    found_ptr, scratch_ptr, out_ptr, out_values_ptr, width, neg_inf_key, stripes, slots,
    HAS_BOUNDS: tl.constexpr, MAX_STRIPES: tl.constexpr, PACK: tl.constexpr,
    CAPACITY: tl.constexpr, ROW_BLOCK: tl.constexpr, KEY_BITS: tl.constexpr,
    FROM_END: tl.constexpr, SORT_BLOCK: tl.constexpr, CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    first, length, seg_ptr = row_segment(
        rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, row, HAS_BOUNDS
    )
    out_row = out_ptr + row * width
    values_row = out_values_ptr + row * width
    keys_row = scratch_ptr + row * (2 * stripes * slots)
    columns_row = keys_row + stripes * slots
    threshold = tl.load(thresholds_ptr + row)
    stripe_ids = tl.arange(0, MAX_STRIPES)
    counts = tl.load(found_ptr + row * stripes + stripe_ids, mask=stripe_ids < stripes, other=0)
    found = tl.sum(counts, axis=0)
    overflow = tl.max(counts, axis=0) > slots
    offset = column_offset + first.to(tl.int32)
    every_finite = threshold == neg_inf_key + 1
    if (~overflow) & (found <= CAPACITY) & ((found >= width) | every_finite):
        # Pack the stripes' candidates to the front, in stripe order: each stripe moves left
        # (to the count of the stripes before it), never over a stripe not yet moved; PACK
        # slots at a time, each read by every thread before any is written.
        pieces = tl.arange(0, PACK)
        packed = tl.zeros((), tl.int32)
        for stripe in range(stripes):
            count = tl.sum(tl.where(stripe_ids == stripe, counts, 0), axis=0)
            for start in range(0, count, PACK):
                keep = start + pieces < count
                source = stripe * slots + start + pieces
                keys = tl.load(keys_row + source, mask=keep)
                columns = tl.load(columns_row + source, mask=keep)
                tl.debug_barrier()
                tl.store(keys_row + packed + start + pieces, keys, mask=keep)
                tl.store(columns_row + packed + start + pieces, columns, mask=keep)
                tl.debug_barrier()
            packed += count
        select_candidates(
            keys_row, columns_row, found, threshold, neg_inf_key, width, out_row, values_row,
            offset, out_values_ptr.dtype.element_ty, CAPACITY, KEY_BITS, FROM_END,
        )  # fmt: skip
    else:
        select_by_radix(
            seg_ptr, col_stride, length, width, out_row, values_row, offset, neg_inf_key,
            ROW_BLOCK, KEY_BITS, FROM_END, SORT_BLOCK,
        )  # fmt: skip


# =====================================================================================
# The segmented select: one pass over each row, every score's work in its own thread
# =====================================================================================
#
# A program owns a row and cuts it into `segments` contiguous runs of columns; each step
# reads `vector` scores of every run (a tile [segments, vector]) and appends the run's
# scores at or above the sampled threshold to the run's own `slots`-slot buffer: a running
# count per run and a prefix sum along the run's step. The runs are contiguous and in
# column order, so their buffers laid end to end (offsets: one prefix sum over the runs'
# counts) are the row's candidates in column order, which select_candidates turns into the
# exact answer. A run whose buffer overflows takes a second pass that stores straight to
# the packed slots (every run's count is known by then); a threshold that missed takes the
# full radix select.
#
# Geometry by key bits, the fastest measured on the H200 (ci/bench_topk.py, 4096 x 131072,
# k = 2048; docs/gpu-validation.md): at most 64 registers a thread, so four programs share
# a multiprocessor, and runs whose step is one coalesced read. fp32 rows as 32 runs of
# 64-score steps (1.08 ms against 1.37 at two programs an SM); bf16 rows as 16 runs of
# 128 scores, read as words of two (0.76-0.87 ms, median 0.79, against 1.06-1.18 for 256
# one-thread runs of 8 scores at Triton's 113-128 registers). fp32's 16 runs of 128 timed
# within 10% either way of its 32 of 64 in four paired runs, no clear gain.


@dataclass(frozen=True)
class Geometry:
    segments: int  # runs per row
    slots: int  # candidate slots per run
    vector: int  # scores a run reads per step
    pack: int  # slots a run moves per step when the buffers are laid end to end
    registers: Optional[int] = None  # ptxas's cap a thread (None: Triton's choice)


SEGMENTED = True
# CONTIGUOUS's value for 16-bit rows that each start 4-byte aligned: the collecting pass
# reads them as words of two scores (run_load); SEGMENT_PAIRED False (a timing knob) reads
# them one score at a time.
PAIRED = tl.constexpr(2)
SEGMENT_PAIRED = True
GEOMETRY_OF = {
    32: Geometry(32, 256, 64, 32, registers=64),
    16: Geometry(16, 512, 128, 64, registers=64),
}
SEGMENT_WARPS = 8
# 0: a program per row. A persistent launch (programs looping over rows) took 194 registers:
# the compiler hoists every phase's index tensors out of the row loop.
PROGRAMS_PER_SM = 0
# Timing knob (ci/bench_topk.py): SEGMENT_STAGES < 3 stops each row after its threshold
# (1) or collecting pass (2).
SEGMENT_STAGES = 3
# Collecting-pass knobs: compare bit patterns for thresholds >= 0 (RAW_HITS); steps loaded
# ahead, by key bits (PREFETCH 1 or 2; 3: two, in three tiles, the loop unrolled so no
# tile is copied to the next: bf16's loop 18.0 -> 16.2 instructions a score and 6% faster
# on the H100, but fp32's spills), or Triton's pipelining over PIPELINE stages (0: off; 2x
# slower on the H200); RETRY: a row the sample misjudged (too few or too many candidates) gets a
# second threshold and collecting pass rather than the full radix select. With RETRY the
# sample can be half as large (SEGMENT_SAMPLE_CHUNKS runs of SAMPLE_CHUNK scores): on the
# H200 (docs/gpu-validation.md) fp32 1.96 -> 1.87 ms, bf16 1.24 -> 1.09 ms, integer
# plateaus 4.17 -> 2.69 ms (fp32) and 2.64 -> 1.71 ms (bf16), where ties at the k-th score
# overflowed the buffer and sent every row to the radix select.
SEGMENT_RAW_HITS = True
SEGMENT_PREFETCH = {32: 2, 16: 3}
SEGMENT_PIPELINE = 0
SEGMENT_RETRY = True
SEGMENT_SAMPLE_CHUNKS = 16


def segmented_scratch_slots(width: int) -> int:
    """(key, column) pairs of one program's scratch, for any dtype: the runs' buffers and
    the packed candidates."""
    runs = max(geometry.segments * geometry.slots for geometry in GEOMETRY_OF.values())
    return runs + capacity_for(width)


def _programs(rows: torch.Tensor) -> int:
    """Programs of the launch: PROGRAMS_PER_SM per multiprocessor (CUDA), looping over the
    rows; 0 a program per row."""
    if PROGRAMS_PER_SM <= 0:
        return rows.size(0)
    if rows.is_cuda:
        sms = torch.cuda.get_device_properties(rows.device).multi_processor_count
        return max(1, min(rows.size(0), sms * PROGRAMS_PER_SM))
    return max(1, min(rows.size(0), PROGRAMS_PER_SM))


def _select_segmented(
    rows: torch.Tensor,
    width: int,
    prefer_large: bool,
    bounds: Optional[Tuple[torch.Tensor, torch.Tensor]],
    column_offset: int,
    values: torch.Tensor,
    out: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """select_rows_filtered's answer by the segmented select, into values and out (rows and
    width not empty; bounds: the rows' contiguous (starts, ends) or None)."""
    count, n = rows.shape
    capacity = capacity_for(width)
    bounded = bounds is not None
    starts, ends = bounds if bounded else (out, out)
    programs = _programs(rows)
    key_bits = KEY_BITS_OF[rows.dtype]
    geometry = GEOMETRY_OF[key_bits]
    runs = torch.empty(
        programs, geometry.segments * geometry.slots, dtype=torch.int64, device=rows.device
    )
    packed = torch.empty(programs, 2, capacity, dtype=torch.int32, device=rows.device)
    contiguous = rows.stride(1) == 1
    aligned = rows.data_ptr() % 4 == 0 and rows.stride(0) % 2 == 0  # every row's start
    if SEGMENT_PAIRED and contiguous and key_bits == 16 and aligned and geometry.vector % 2 == 0:
        contiguous = PAIRED.value
    segmented_select[(programs,)](
        rows, rows.stride(0), rows.stride(1), n, count, starts, ends, column_offset, runs, packed,
        out, values, width, max(1, int((width * capacity) ** 0.5)),
        _negative_infinity_key(rows.dtype), HAS_BOUNDS=bounded, CAPACITY=capacity,
        SAMPLE_CHUNKS=SEGMENT_SAMPLE_CHUNKS, SAMPLE_CHUNK=SAMPLE_CHUNK,
        SEGMENTS=geometry.segments, SLOTS=geometry.slots, VECTOR=geometry.vector,
        PACK=geometry.pack, ROW_BLOCK=ROW_BLOCK,
        KEY_BITS=key_bits, FROM_END=prefer_large, SORT_BLOCK=triton.next_power_of_2(width),
        CONTIGUOUS=contiguous, PERSISTENT=PROGRAMS_PER_SM > 0, STAGES=SEGMENT_STAGES,
        RAW_HITS=SEGMENT_RAW_HITS, PREFETCH=SEGMENT_PREFETCH[key_bits], PIPELINE=SEGMENT_PIPELINE,
        RETRY=SEGMENT_RETRY, num_warps=SEGMENT_WARPS,
        **({"maxnreg": geometry.registers} if geometry.registers and NVIDIA else {}),
    )  # fmt: skip
    return values, out


@triton.jit
def full_blocks(first, last, VECTOR: tl.constexpr):
    """The VECTOR-wide column blocks that lie whole in [first, last): [start, stop). The
    columns of the partial blocks at either end are each one edge_step."""
    start = tl.cdiv(first, VECTOR)
    return start, tl.maximum(last // VECTOR, start)


@triton.jit
def run_bases(start, stop, SEGMENTS: tl.constexpr):
    """SEGMENTS runs of column blocks cover blocks [start, stop): each run's first block,
    the block it stops before, and the steps a run takes."""
    steps = tl.cdiv(stop - start, SEGMENTS)
    base = (start + tl.arange(0, SEGMENTS) * steps)[:, None]
    return base, tl.minimum(base + steps, stop), steps


@triton.jit
def load_scores(row_ptr, col_stride, columns, mask, CONTIGUOUS: tl.constexpr):
    """The scores at ``columns`` where mask, -inf elsewhere: below every threshold, so no
    hit needs the mask again."""
    if CONTIGUOUS:
        return tl.load(row_ptr + columns, mask=mask, other=float("-inf"))
    return tl.load(row_ptr + columns.to(tl.int64) * col_stride, mask=mask, other=float("-inf"))


@triton.jit
def run_load(
    row_ptr, col_stride, base, stops, step, VECTOR: tl.constexpr, CONTIGUOUS: tl.constexpr
):
    """Step ``step`` of every run (runs start at blocks ``base`` and stop before blocks
    ``stops``): the columns and the scores, -inf past the run's last block (never a hit).
    The mask is constant along each block, so the loads stay vectorized where the rows'
    addresses allow (contiguous rows whose stride is a multiple of VECTOR)."""
    block = base + step
    if CONTIGUOUS == PAIRED:
        # Two 16-bit scores a word, carried as loaded: as 16-bit values the compiler unpacks
        # them at the load (a PRMT a pair), so each step would wait for its own prefetch.
        # The columns are the words' even ones.
        half = tl.arange(0, VECTOR // 2)[None, :]
        words = row_ptr.to(tl.pointer_type(tl.int32)) + block * (VECTOR // 2) + half
        # -inf in both halves (never a hit): 0xFF80FF80 for bf16, 0xFC00FC00 for fp16.
        nothing = -8323200 if row_ptr.dtype.element_ty == tl.bfloat16 else -67044352
        columns = block * VECTOR + 2 * half
        x = tl.load(words, mask=block < stops, other=nothing)
    else:
        columns = block * VECTOR + tl.arange(0, VECTOR)[None, :]
        x = load_scores(row_ptr, col_stride, columns, block < stops, CONTIGUOUS)
    return columns, x


@triton.jit
def score_bits(x, KEY_BITS: tl.constexpr):
    """The scores' bit patterns, sign-extended to int32."""
    if KEY_BITS == 16:
        bits = x.to(tl.int16, bitcast=True).to(tl.int32)
    else:
        bits = x.to(tl.int32, bitcast=True)
    return bits


@triton.jit
def run_hits(
    bits, threshold, KEY_BITS: tl.constexpr, RAW: tl.constexpr = False
):  # fmt: skip
    """The keys of the scores with bit patterns ``bits`` (score_bits), and which are at or
    above the threshold. RAW (for a threshold >= 0 only): the bit patterns stand for the
    keys, which they equal for every score >= +0.0, and every score below +0.0 has negative
    bits, below the threshold. The threshold lies above -inf's key, so -inf and negative NaN
    fail it; a positive NaN (its key above +inf's) passes: select_candidates hands such a
    row to the radix select, which keeps the loop one compare a score."""
    if RAW:
        key = bits
    else:
        key = bits ^ ((bits >> (KEY_BITS - 1)) & ((1 << (KEY_BITS - 1)) - 1))
    return key, key >= threshold


@triton.jit
def store_pairs(pointers, keys, columns, mask):
    """Store keys << 32 | columns (int64) at pointers where mask. Compiled, as one predicated
    64-bit store an element in the layout the values are computed in: tl.store would first
    move them through shared memory (with barriers, every step) into a layout it picks for
    scattered addresses. Where no PTX runs (SCATTER_ASM false): tl.store."""
    if SCATTER_ASM:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $4, 0; @p st.global.v2.b32 [$1], {$3, $2}; "
            "mov.b32 $0, 0; }",
            "=r,l,r,r,r", [pointers, keys, columns, mask.to(tl.int32)], dtype=tl.int32,
            is_pure=False, pack=1,
        )  # fmt: skip
    else:
        tl.store(pointers, (keys.to(tl.int64) << 32) | columns.to(tl.int64), mask=mask)


@triton.jit
def collect_step(
    x, columns, found, destination, columns_row, threshold,
    SLOTS: tl.constexpr, KEY_BITS: tl.constexpr, RAW: tl.constexpr, PLACE: tl.constexpr,
):  # fmt: skip
    """One step of collect_pass: each run's hits in column order after its ``found``.
    Collecting, into the run's buffer at ``destination`` (its first SLOTS); PLACE, into the
    packed keys (``destination``) and columns. ``x``: the scores, or for 16-bit scores
    words of two (run_load, PAIRED), ``columns`` then the words' even columns."""
    if KEY_BITS == 16 and x.dtype == tl.int32:
        # Little-endian: a word's low half is its even column's score.
        key, hit = run_hits((x << 16) >> 16, threshold, KEY_BITS, RAW)
        odd_key, odd_hit = run_hits(x >> 16, threshold, KEY_BITS, RAW)
        even = hit.to(tl.int32)
        hits = even + odd_hit.to(tl.int32)  # a word's
        slot = found[:, None] + tl.cumsum(hits, axis=1) - hits  # each word's first slot
        store_hits(key, hit, slot, columns, destination, columns_row, SLOTS, PLACE)
        store_hits(
            odd_key, odd_hit, slot + even, columns + 1, destination, columns_row, SLOTS, PLACE
        )
    else:
        key, hit = run_hits(score_bits(x, KEY_BITS), threshold, KEY_BITS, RAW)
        hits = hit.to(tl.int32)
        slot = found[:, None] + tl.cumsum(hits, axis=1) - 1
        store_hits(key, hit, slot, columns, destination, columns_row, SLOTS, PLACE)
    return found + tl.sum(hits, axis=1)


@triton.jit
def store_hits(
    key, hit, slot, columns, destination, columns_row, SLOTS: tl.constexpr,
    PLACE: tl.constexpr,
):  # fmt: skip
    """collect_step's stores of the hits' keys and columns at their slots."""
    if PLACE:
        # Packed as the runs' buffers are: Triton 3.6's layout pass fails (dominance) on the
        # plain stores of key and columns for 16-bit rows.
        entry = (key.to(tl.int64) << 32) | columns.to(tl.int64)
        tl.store(destination + slot, (entry >> 32).to(tl.int32), mask=hit)
        tl.store(columns_row + slot, entry.to(tl.int32), mask=hit)
    else:
        store_pairs(destination + slot, key, columns, hit & (slot < SLOTS))


@triton.jit
def edge_step(
    row_ptr, col_stride, run, lo, hi, found, destination, columns_row, threshold,
    SEGMENTS: tl.constexpr, SLOTS: tl.constexpr,
    VECTOR: tl.constexpr, KEY_BITS: tl.constexpr, CONTIGUOUS: tl.constexpr,
    RAW: tl.constexpr, PLACE: tl.constexpr,
):  # fmt: skip
    """collect_step for the columns [lo, hi) of one block, as run ``run``'s (the other runs
    load nothing)."""
    columns = (lo // VECTOR) * VECTOR + tl.arange(0, VECTOR)[None, :]
    columns = columns + tl.zeros((SEGMENTS, 1), tl.int32)
    inside = (tl.arange(0, SEGMENTS)[:, None] == run) & (columns >= lo) & (columns < hi)
    x = load_scores(row_ptr, col_stride, columns, inside, CONTIGUOUS)
    return collect_step(
        x, columns, found, destination, columns_row, threshold,
        SLOTS, KEY_BITS, RAW, PLACE,
    )  # fmt: skip


@triton.jit
def collect_pass(
    row_ptr, col_stride, first, last, threshold, found, destination,
    columns_row, SEGMENTS: tl.constexpr, SLOTS: tl.constexpr, VECTOR: tl.constexpr,
    KEY_BITS: tl.constexpr, CONTIGUOUS: tl.constexpr, RAW: tl.constexpr,
    PREFETCH: tl.constexpr, PIPELINE: tl.constexpr, PLACE: tl.constexpr,
):  # fmt: skip
    """One pass over the columns [first, last), each run's hits after its ``found``; the
    threshold must lie above -inf's key (masked lanes read -inf). Collecting (PLACE false):
    into each run's buffer, ``destination`` (runs by SLOTS slots; ``columns_row`` unused).
    Placing (PLACE true; ``found``: each run's first packed slot): keys at ``destination``,
    columns at ``columns_row``, with no limit (SLOTS unused).

    The runs cover the whole blocks inside [first, last), so their steps test no column
    against the bounds; the partial block before them joins run 0, the one after them the
    last run (their candidates stay in column order). The next PREFETCH steps' scores are
    loaded while a step's are scanned (PREFETCH 3: the next two, in three tiles; PIPELINE >
    0: Triton's own pipelining over that many stages instead); only the scores are carried
    from step to step, the columns are recomputed."""
    start, stop = full_blocks(first, last, VECTOR)
    head_end = tl.minimum(start * VECTOR, last)
    found = edge_step(
        row_ptr, col_stride, 0, first, head_end, found, destination, columns_row, threshold,
        SEGMENTS, SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, RAW, PLACE,
    )  # fmt: skip
    base, stops, steps = run_bases(start, stop, SEGMENTS)
    if PIPELINE > 0:
        for step in tl.range(0, steps, num_stages=PIPELINE):
            columns, x = run_load(row_ptr, col_stride, base, stops, step, VECTOR, CONTIGUOUS)
            found = collect_step(
                x, columns, found, destination, columns_row, threshold,
                SLOTS, KEY_BITS, RAW, PLACE,
            )  # fmt: skip
    elif PREFETCH == 3:
        # Each tile loaded again, three steps on, as soon as it is scanned: two steps' loads
        # in flight and no register copies from tile to tile. Steps past a run's end load
        # -inf (no hit).
        x0 = run_load(row_ptr, col_stride, base, stops, 0, VECTOR, CONTIGUOUS)[1]
        x1 = run_load(row_ptr, col_stride, base, stops, 1, VECTOR, CONTIGUOUS)[1]
        x2 = run_load(row_ptr, col_stride, base, stops, 2, VECTOR, CONTIGUOUS)[1]
        for step in range(0, steps, 3):
            found, x0 = scan_then_load(
                x0, step, found, row_ptr, col_stride, base, stops, destination, columns_row,
                threshold, SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, RAW, PLACE,
            )  # fmt: skip
            found, x1 = scan_then_load(
                x1, step + 1, found, row_ptr, col_stride, base, stops, destination,
                columns_row, threshold, SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, RAW, PLACE,
            )  # fmt: skip
            found, x2 = scan_then_load(
                x2, step + 2, found, row_ptr, col_stride, base, stops, destination,
                columns_row, threshold, SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, RAW, PLACE,
            )  # fmt: skip
    else:
        x = run_load(row_ptr, col_stride, base, stops, 0, VECTOR, CONTIGUOUS)[1]
        x1 = x
        if PREFETCH == 2:
            x1 = run_load(row_ptr, col_stride, base, stops, 1, VECTOR, CONTIGUOUS)[1]
        for step in range(0, steps):
            columns, ahead = run_load(
                row_ptr, col_stride, base, stops, step + PREFETCH, VECTOR, CONTIGUOUS
            )
            columns = columns - PREFETCH * VECTOR
            found = collect_step(
                x, columns, found, destination, columns_row, threshold,
                SLOTS, KEY_BITS, RAW, PLACE,
            )  # fmt: skip
            if PREFETCH == 2:
                x = x1
                x1 = ahead
            else:
                x = ahead
    return edge_step(
        row_ptr, col_stride, SEGMENTS - 1, tl.maximum(stop * VECTOR, head_end), last, found,
        destination, columns_row, threshold, SEGMENTS, SLOTS, VECTOR,
        KEY_BITS, CONTIGUOUS, RAW, PLACE,
    )  # fmt: skip


@triton.jit
def scan_then_load(
    x, step, found, row_ptr, col_stride, base, stops, destination, columns_row, threshold,
    SLOTS: tl.constexpr, VECTOR: tl.constexpr, KEY_BITS: tl.constexpr,
    CONTIGUOUS: tl.constexpr, RAW: tl.constexpr, PLACE: tl.constexpr,
):  # fmt: skip
    """collect_pass's PREFETCH 3: collect_step over ``x``, the scores of step ``step``, and
    the scores of step ``step + 3`` to take their place."""
    columns, ahead = run_load(row_ptr, col_stride, base, stops, step + 3, VECTOR, CONTIGUOUS)
    found = collect_step(
        x, columns - 3 * VECTOR, found, destination, columns_row, threshold, SLOTS, KEY_BITS,
        RAW, PLACE,
    )  # fmt: skip
    return found, ahead


@triton.jit
def collect_runs(
    row_ptr, col_stride, first, last, threshold, runs,
    SEGMENTS: tl.constexpr, SLOTS: tl.constexpr, VECTOR: tl.constexpr, KEY_BITS: tl.constexpr,
    CONTIGUOUS: tl.constexpr, RAW_HITS: tl.constexpr = False, PREFETCH: tl.constexpr = 1,
    PIPELINE: tl.constexpr = 0,
):  # fmt: skip
    """Append each run's keys at or above threshold, with their columns, to the run's
    buffer (packed key << 32 | column, the first SLOTS); return each run's count. The
    threshold lies above -inf's key (threshold_for's floor, finish_row's retry), which
    collect_pass needs. RAW_HITS: rows whose threshold is >= 0 compare bit patterns (no key
    transform per score)."""
    found = tl.zeros((SEGMENTS,), tl.int32)
    buffers = runs + tl.arange(0, SEGMENTS)[:, None] * SLOTS
    # Collecting (PLACE false) into the runs' buffers: a pass compiled for raw keys, one for
    # transformed keys (RAW, the 14th argument, is a constant).
    if RAW_HITS and threshold >= 0:
        found = collect_pass(
            row_ptr, col_stride, first, last, threshold, found, buffers,
            buffers, SEGMENTS, SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, True, PREFETCH, PIPELINE,
            PLACE=False,
        )  # fmt: skip
    else:
        found = collect_pass(
            row_ptr, col_stride, first, last, threshold, found, buffers,
            buffers, SEGMENTS, SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, False, PREFETCH, PIPELINE,
            PLACE=False,
        )  # fmt: skip
    return found


@triton.jit
def place_runs(
    row_ptr, col_stride, first, last, threshold, found, keys_row,
    columns_row, SEGMENTS: tl.constexpr, VECTOR: tl.constexpr, KEY_BITS: tl.constexpr,
    CONTIGUOUS: tl.constexpr,
):  # fmt: skip
    """A second pass for rows where a run overflowed its buffer: with every run's count
    known, store its candidates straight to their packed slots."""
    placed = tl.cumsum(found, axis=0) - found
    tl.debug_barrier()  # the scratch's earlier readers are done
    collect_pass(
        row_ptr, col_stride, first, last, threshold, placed,
        destination=keys_row, columns_row=columns_row, SEGMENTS=SEGMENTS, SLOTS=0,
        VECTOR=VECTOR, KEY_BITS=KEY_BITS, CONTIGUOUS=CONTIGUOUS, RAW=False, PREFETCH=1,
        PIPELINE=0, PLACE=True,
    )  # fmt: skip
    tl.debug_barrier()  # the packed candidates are visible before they are read


@triton.jit
def pack_runs(
    runs, found, keys_row, columns_row, SEGMENTS: tl.constexpr, SLOTS: tl.constexpr,
    PACK: tl.constexpr,
):  # fmt: skip
    """Lay the runs' buffers (found[s] entries each, at most SLOTS) end to end as keys and
    columns."""
    segment = tl.arange(0, SEGMENTS)[:, None]
    piece = tl.arange(0, PACK)[None, :]
    before = (tl.cumsum(found, axis=0) - found)[:, None]
    tl.debug_barrier()  # every run's stores are visible to every thread
    for start in range(0, tl.max(found, axis=0), PACK):
        keep = start + piece < found[:, None]
        entry = tl.load(runs + segment * SLOTS + start + piece, mask=keep, other=0)
        tl.store(keys_row + before + start + piece, (entry >> 32).to(tl.int32), mask=keep)
        tl.store(columns_row + before + start + piece, entry.to(tl.int32), mask=keep)
    tl.debug_barrier()  # the packed candidates are visible before they are read


@triton.jit
def segmented_row(
    rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, column_offset, runs, keys_row,
    columns_row, out_ptr, out_values_ptr, width, target, neg_inf_key, row,
    HAS_BOUNDS: tl.constexpr, CAPACITY: tl.constexpr, SAMPLE_CHUNKS: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr, SEGMENTS: tl.constexpr, SLOTS: tl.constexpr,
    VECTOR: tl.constexpr, PACK: tl.constexpr, ROW_BLOCK: tl.constexpr,
    KEY_BITS: tl.constexpr, FROM_END: tl.constexpr, SORT_BLOCK: tl.constexpr,
    CONTIGUOUS: tl.constexpr, STAGES: tl.constexpr,
    RAW_HITS: tl.constexpr, PREFETCH: tl.constexpr, PIPELINE: tl.constexpr,
    RETRY: tl.constexpr,
):  # fmt: skip
    """One row: threshold, one pass that collects the runs' candidates, then
    select_candidates (or the full radix select). STAGES < 3 stops after the threshold (1)
    or the collecting pass (2), for timing the stages apart (ci/bench_topk.py)."""
    first, length, seg_ptr = row_segment(
        rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, row, HAS_BOUNDS
    )
    out_row = out_ptr + row * width
    values_row = out_values_ptr + row * width
    threshold = threshold_for(
        seg_ptr, col_stride, length, target, neg_inf_key, CAPACITY, SAMPLE_CHUNKS,
        SAMPLE_CHUNK, KEY_BITS, CONTIGUOUS,
    )  # fmt: skip
    if STAGES == 1:
        tl.store(out_row, threshold)
        return
    found = collect_runs(
        rows_ptr + row * row_stride, col_stride, first.to(tl.int32),
        (first + length).to(tl.int32), threshold, runs,
        SEGMENTS, SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, RAW_HITS, PREFETCH, PIPELINE,
    )  # fmt: skip
    finish_row(
        rows_ptr + row * row_stride, col_stride, first, length, seg_ptr, threshold, found,
        tl.sum(found, axis=0), target, runs, keys_row, columns_row, out_row, values_row,
        column_offset, width, neg_inf_key, out_values_ptr.dtype.element_ty, CAPACITY,
        SAMPLE_CHUNKS, SAMPLE_CHUNK, SEGMENTS, SLOTS, VECTOR, PACK, ROW_BLOCK, KEY_BITS,
        FROM_END, SORT_BLOCK, CONTIGUOUS, STAGES, RAW_HITS, PREFETCH, PIPELINE, RETRY,
    )  # fmt: skip


@triton.jit
def finish_row(
    row_ptr, col_stride, first, length, seg_ptr, threshold, found, total, target, runs,
    keys_row, columns_row, out_row, values_row, column_offset, width, neg_inf_key,
    values_dtype: tl.constexpr, CAPACITY: tl.constexpr, SAMPLE_CHUNKS: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr, SEGMENTS: tl.constexpr, SLOTS: tl.constexpr,
    VECTOR: tl.constexpr, PACK: tl.constexpr, ROW_BLOCK: tl.constexpr,
    KEY_BITS: tl.constexpr, FROM_END: tl.constexpr, SORT_BLOCK: tl.constexpr,
    CONTIGUOUS: tl.constexpr, STAGES: tl.constexpr,
    RAW_HITS: tl.constexpr, PREFETCH: tl.constexpr, PIPELINE: tl.constexpr,
    RETRY: tl.constexpr,
):  # fmt: skip
    """The row after a collecting pass at ``threshold`` that found ``total`` candidates
    (``found`` per run of ``runs``): the retry when the threshold misjudged the row, then
    select_candidates, or the full radix select."""
    if RETRY:
        too_few = (total < width) & (threshold > neg_inf_key + 1)
        if too_few | (total > CAPACITY):
            # The sample misjudged the row: aim a threshold at target again (the sample's
            # rank scaled by target / total), below (above) the first when it admitted too
            # few (too many) scores, then collect once more.
            retarget = (target.to(tl.int64) * target) // tl.maximum(total, 1)
            again = threshold_for(
                seg_ptr, col_stride, length, retarget, neg_inf_key, CAPACITY, SAMPLE_CHUNKS,
                SAMPLE_CHUNK, KEY_BITS, CONTIGUOUS,
            )  # fmt: skip
            threshold = tl.where(
                too_few, tl.minimum(again, threshold - 1), tl.maximum(again, threshold + 1)
            )
            found = collect_runs(
                row_ptr, col_stride, first.to(tl.int32),
                (first + length).to(tl.int32), threshold, runs,
                SEGMENTS, SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, RAW_HITS, PREFETCH,
                PIPELINE,
            )  # fmt: skip
            total = tl.sum(found, axis=0)
    if STAGES == 2:
        tl.store(out_row, total)
        return
    every_finite = threshold == neg_inf_key + 1
    answered = total < 0  # false until select_candidates answers the row
    if (total <= CAPACITY) & ((total >= width) | every_finite):
        if tl.max(found, axis=0) > SLOTS:
            place_runs(
                row_ptr, col_stride, first.to(tl.int32),
                (first + length).to(tl.int32), threshold, found,
                keys_row, columns_row, SEGMENTS, VECTOR, KEY_BITS, CONTIGUOUS,
            )  # fmt: skip
        else:
            pack_runs(runs, found, keys_row, columns_row, SEGMENTS, SLOTS, PACK)
        answered = select_candidates(
            keys_row, columns_row, total, threshold, neg_inf_key, width, out_row,
            values_row, column_offset, values_dtype, CAPACITY,
            KEY_BITS, FROM_END,
        )  # fmt: skip
    if answered == 0:  # the threshold missed, or a NaN was collected
        select_by_radix(
            seg_ptr, col_stride, length, width, out_row, values_row,
            column_offset + first.to(tl.int32), neg_inf_key, ROW_BLOCK, KEY_BITS,
            FROM_END, SORT_BLOCK,
        )  # fmt: skip


# One compiled kernel for every row length, bound and width (as filter_select_row).
@triton.jit(
    do_not_specialize=["col_stride", "n", "count", "column_offset", "width", "target", "neg_inf_key"]
)  # fmt: skip
def segmented_select(
    rows_ptr, row_stride, col_stride, n, count, starts_ptr, ends_ptr, column_offset, runs_ptr,
    packed_ptr, out_ptr, out_values_ptr, width, target, neg_inf_key,
    HAS_BOUNDS: tl.constexpr, CAPACITY: tl.constexpr, SAMPLE_CHUNKS: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr, SEGMENTS: tl.constexpr, SLOTS: tl.constexpr,
    VECTOR: tl.constexpr, PACK: tl.constexpr, ROW_BLOCK: tl.constexpr,
    KEY_BITS: tl.constexpr, FROM_END: tl.constexpr, SORT_BLOCK: tl.constexpr,
    CONTIGUOUS: tl.constexpr, PERSISTENT: tl.constexpr,
    STAGES: tl.constexpr, RAW_HITS: tl.constexpr, PREFETCH: tl.constexpr,
    PIPELINE: tl.constexpr, RETRY: tl.constexpr,
):  # fmt: skip
    """PERSISTENT: a program selects rows program, program + programs, ... (its scratch
    reused); else program r selects row r with scratch of its own."""
    program = tl.program_id(0)
    runs = runs_ptr + program.to(tl.int64) * (SEGMENTS * SLOTS)
    keys_row = packed_ptr + program.to(tl.int64) * (2 * CAPACITY)
    columns_row = keys_row + CAPACITY
    if PERSISTENT:
        for row_id in range(program, count, tl.num_programs(0)):
            segmented_row(
                rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, column_offset,
                runs, keys_row, columns_row, out_ptr, out_values_ptr, width, target,
                neg_inf_key, row_id + tl.zeros((), tl.int64), HAS_BOUNDS, CAPACITY,
                SAMPLE_CHUNKS, SAMPLE_CHUNK, SEGMENTS, SLOTS, VECTOR, PACK, ROW_BLOCK,
                KEY_BITS, FROM_END, SORT_BLOCK, CONTIGUOUS, STAGES, RAW_HITS,
                PREFETCH, PIPELINE, RETRY,
            )  # fmt: skip
            tl.debug_barrier()  # this row's reads of the scratch end before the next's writes
    else:
        segmented_row(
            rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, column_offset, runs,
            keys_row, columns_row, out_ptr, out_values_ptr, width, target, neg_inf_key,
            program.to(tl.int64), HAS_BOUNDS, CAPACITY, SAMPLE_CHUNKS, SAMPLE_CHUNK,
            SEGMENTS, SLOTS, VECTOR, PACK, ROW_BLOCK, KEY_BITS, FROM_END, SORT_BLOCK,
            CONTIGUOUS, STAGES, RAW_HITS, PREFETCH, PIPELINE, RETRY,
        )  # fmt: skip


# =====================================================================================
# The split select: the collecting pass in a launch of its own
# =====================================================================================
#
# The segmented select's program holds the select phase's 4096 candidates in registers
# (124-128 of them), so its collecting loop runs at two programs (16 warps) per
# multiprocessor and is bound by latency, not memory. The split select runs the same three
# phases as three launches, each at its own size:
#
# 1. row_thresholds (the striped select's): a program per row samples the threshold.
# 2. split_collect: a program per chunk of a row (CHUNKS equal column ranges of its segment,
#    each a multiple of VECTOR long from the segment's first column) runs collect_runs over
#    its chunk alone, into the chunk's runs of the row's buffer, and stores each run's
#    count. It holds a few scores a thread: many programs per multiprocessor.
# 3. split_select: a program per row lays the chunks' runs end to end (chunks and runs are
#    contiguous column ranges in order, so the candidates are in column order) and runs
#    select_candidates. A row whose threshold missed (too few or too many candidates) or
#    whose run overflowed its buffer goes on as the segmented select's row would after its
#    first pass (finish_row: the retry, the second pass, the full radix select), with the
#    row's buffer as its scratch.
#
# Measured on the H200 (docs/gpu-validation.md, 4096 x 131072, k = 2048) it loses to the
# fused select on every geometry tried: fp32 2.44-2.56 ms against 1.86-1.94, bf16
# 2.14-2.51 against 1.11-1.15. Its collecting launch runs at twice the fused loop's
# occupancy and is still slower (fp32 1.5-1.9 ms against 1.2-1.3): the loop is bound by
# its instructions per score (ncu: the SM 60-80% busy, DRAM 26-35%), not by occupancy.
# SPLIT (off) keeps it for timing (ci/bench_topk.py) and for rows it may suit later.


@dataclass(frozen=True)
class SplitGeometry:
    chunk: int  # scores a collecting program takes, at most (its row's chunks: a power of 2)
    segments: int  # runs per chunk
    vector: int  # scores a run reads per step
    slots: int  # candidate slots per run
    warps: int  # warps of a collecting program


SPLIT = False
SPLIT_GEOMETRY_OF = {
    32: SplitGeometry(chunk=8192, segments=4, vector=128, slots=128, warps=4),
    16: SplitGeometry(chunk=8192, segments=4, vector=256, slots=128, warps=4),
}
SPLIT_THRESHOLD_WARPS = 4
SPLIT_SELECT_WARPS = 8
# Timing knob (ci/bench_topk.py): < 3 stops after the thresholds (1) or the collecting
# launch (2).
SPLIT_STAGES = 3


def split_chunks(n: int, geometry: SplitGeometry) -> int:
    """Collecting programs per row of n scores: a power of 2, about n / geometry.chunk."""
    return triton.next_power_of_2(max(1, triton.cdiv(n, geometry.chunk)))


def split_scratch_slots(width: int, n: int) -> int:
    """(key, column) pairs of scratch a row takes: its runs' buffers (at least what the
    segmented select's fallback needs) and the packed candidates."""
    runs = max(geometry.segments * geometry.slots for geometry in GEOMETRY_OF.values())
    for geometry in SPLIT_GEOMETRY_OF.values():
        runs = max(runs, split_chunks(n, geometry) * geometry.segments * geometry.slots)
    return runs + capacity_for(width)


def _select_split(
    rows: torch.Tensor,
    width: int,
    prefer_large: bool,
    bounds: Optional[Tuple[torch.Tensor, torch.Tensor]],
    column_offset: int,
    values: torch.Tensor,
    out: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """select_rows_filtered's answer by the split select (as _select_segmented's)."""
    count, n = rows.shape
    capacity = capacity_for(width)
    bounded = bounds is not None
    starts, ends = bounds if bounded else (out, out)
    key_bits = KEY_BITS_OF[rows.dtype]
    split = SPLIT_GEOMETRY_OF[key_bits]
    fallback = GEOMETRY_OF[key_bits]
    chunks = split_chunks(n, split)
    run_stride = max(chunks * split.segments * split.slots, fallback.segments * fallback.slots)
    runs = torch.empty(count, run_stride, dtype=torch.int64, device=rows.device)
    counts = torch.empty(count, chunks * split.segments, dtype=torch.int32, device=rows.device)
    packed = torch.empty(count, 2, capacity, dtype=torch.int32, device=rows.device)
    thresholds = torch.empty(count, dtype=torch.int32, device=rows.device)
    contiguous = rows.stride(1) == 1
    target = max(1, int((width * capacity) ** 0.5))
    neg_inf_key = _negative_infinity_key(rows.dtype)
    row_args = (rows, rows.stride(0), rows.stride(1), n, starts, ends)
    common = dict(HAS_BOUNDS=bounded, KEY_BITS=key_bits, CONTIGUOUS=contiguous)
    row_thresholds[(count,)](
        *row_args, thresholds, target, neg_inf_key, CAPACITY=capacity,
        SAMPLE_CHUNKS=SEGMENT_SAMPLE_CHUNKS, SAMPLE_CHUNK=SAMPLE_CHUNK,
        num_warps=SPLIT_THRESHOLD_WARPS, **common,
    )  # fmt: skip
    if SPLIT_STAGES == 1:
        return values, out
    split_collect[(count * chunks,)](
        *row_args, thresholds, runs, run_stride, counts, neg_inf_key, CHUNKS=chunks,
        SEGMENTS=split.segments, SLOTS=split.slots, VECTOR=split.vector,
        RAW_HITS=SEGMENT_RAW_HITS, PREFETCH=SEGMENT_PREFETCH[key_bits], num_warps=split.warps,
        **common,
    )  # fmt: skip
    if SPLIT_STAGES == 2:
        return values, out
    all_runs = chunks * split.segments
    split_select[(count,)](
        *row_args, column_offset, thresholds, runs, run_stride, counts, packed, out, values,
        width, target, neg_inf_key, CAPACITY=capacity, ALL_RUNS=all_runs,
        SPLIT_SLOTS=split.slots, SPLIT_PACK=max(1, 4096 // all_runs),
        SAMPLE_CHUNKS=SEGMENT_SAMPLE_CHUNKS, SAMPLE_CHUNK=SAMPLE_CHUNK,
        SEGMENTS=fallback.segments, SLOTS=fallback.slots, VECTOR=fallback.vector,
        PACK=fallback.pack, ROW_BLOCK=ROW_BLOCK, FROM_END=prefer_large,
        SORT_BLOCK=triton.next_power_of_2(width), RAW_HITS=SEGMENT_RAW_HITS,
        PREFETCH=SEGMENT_PREFETCH[key_bits], RETRY=SEGMENT_RETRY, num_warps=SPLIT_SELECT_WARPS,
        **common,
    )  # fmt: skip
    return values, out


@triton.jit(do_not_specialize=["row_stride", "col_stride", "n", "run_stride", "neg_inf_key"])
def split_collect(
    rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, thresholds_ptr, runs_ptr,
    run_stride, counts_ptr, neg_inf_key, HAS_BOUNDS: tl.constexpr, CHUNKS: tl.constexpr,
    SEGMENTS: tl.constexpr, SLOTS: tl.constexpr, VECTOR: tl.constexpr,
    KEY_BITS: tl.constexpr, CONTIGUOUS: tl.constexpr,
    RAW_HITS: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    """Chunk program % CHUNKS of row program // CHUNKS (a row's chunks are launched
    together, so programs side by side read neighbouring columns): its candidates into its
    runs' buffers, each run's count (all of them, also past SLOTS) into the row's counts."""
    program = tl.program_id(0)
    row = (program // CHUNKS).to(tl.int64)
    chunk = program % CHUNKS
    first, length, _ = row_segment(
        rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, row, HAS_BOUNDS
    )
    share = tl.cdiv(tl.cdiv(length, CHUNKS), VECTOR) * VECTOR
    last = first.to(tl.int32) + length
    chunk_first = tl.minimum(first.to(tl.int32) + chunk * share, last)
    chunk_last = tl.minimum(chunk_first + share, last)
    runs = runs_ptr + row * run_stride + chunk * (SEGMENTS * SLOTS)
    found = collect_runs(
        rows_ptr + row * row_stride, col_stride, chunk_first, chunk_last,
        tl.load(thresholds_ptr + row), runs, SEGMENTS, SLOTS, VECTOR,
        KEY_BITS, CONTIGUOUS, RAW_HITS, PREFETCH,
    )  # fmt: skip
    tl.store(
        counts_ptr + row * (CHUNKS * SEGMENTS) + chunk * SEGMENTS + tl.arange(0, SEGMENTS), found
    )


@triton.jit(
    do_not_specialize=[
        "row_stride", "col_stride", "n", "column_offset", "run_stride", "width", "target",
        "neg_inf_key",
    ]
)  # fmt: skip
def split_select(
    rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, column_offset, thresholds_ptr,
    runs_ptr, run_stride, counts_ptr, packed_ptr, out_ptr, out_values_ptr, width, target,
    neg_inf_key, HAS_BOUNDS: tl.constexpr, CAPACITY: tl.constexpr, ALL_RUNS: tl.constexpr,
    SPLIT_SLOTS: tl.constexpr, SPLIT_PACK: tl.constexpr, SAMPLE_CHUNKS: tl.constexpr,
    SAMPLE_CHUNK: tl.constexpr, SEGMENTS: tl.constexpr, SLOTS: tl.constexpr,
    VECTOR: tl.constexpr, PACK: tl.constexpr, ROW_BLOCK: tl.constexpr,
    KEY_BITS: tl.constexpr, FROM_END: tl.constexpr, SORT_BLOCK: tl.constexpr,
    CONTIGUOUS: tl.constexpr, RAW_HITS: tl.constexpr,
    PREFETCH: tl.constexpr, RETRY: tl.constexpr,
):  # fmt: skip
    """Row program_id(0) from its chunks' runs (ALL_RUNS of SPLIT_SLOTS slots, in column
    order): select_candidates, or finish_row's retry / second pass / radix select."""
    row = tl.program_id(0).to(tl.int64)
    first, length, seg_ptr = row_segment(
        rows_ptr, row_stride, col_stride, n, starts_ptr, ends_ptr, row, HAS_BOUNDS
    )
    out_row = out_ptr + row * width
    values_row = out_values_ptr + row * width
    keys_row = packed_ptr + row * (2 * CAPACITY)
    columns_row = keys_row + CAPACITY
    runs = runs_ptr + row * run_stride
    threshold = tl.load(thresholds_ptr + row)
    found = tl.load(counts_ptr + row * ALL_RUNS + tl.arange(0, ALL_RUNS))
    total = tl.sum(found, axis=0)
    every_finite = threshold == neg_inf_key + 1
    fits = (tl.max(found, axis=0) <= SPLIT_SLOTS) & (total <= CAPACITY)
    if fits & ((total >= width) | every_finite):
        pack_runs(runs, found, keys_row, columns_row, ALL_RUNS, SPLIT_SLOTS, SPLIT_PACK)
        answered = select_candidates(
            keys_row, columns_row, total, threshold, neg_inf_key, width, out_row, values_row,
            column_offset, out_values_ptr.dtype.element_ty, CAPACITY, KEY_BITS, FROM_END,
        )  # fmt: skip
        if answered == 0:  # a NaN was collected
            select_by_radix(
                seg_ptr, col_stride, length, width, out_row, values_row,
                column_offset + first.to(tl.int32), neg_inf_key, ROW_BLOCK, KEY_BITS,
                FROM_END, SORT_BLOCK,
            )  # fmt: skip
    else:
        # The row goes on as the segmented select's would after its first pass: the retry
        # when the threshold misjudged it, else a pass at the same threshold into runs of
        # the segmented geometry (a chunk's run overflowed its buffer).
        misjudged = ((total < width) & ~every_finite) | (total > CAPACITY)
        row_found = tl.zeros((SEGMENTS,), tl.int32)
        same_threshold = total >= 0
        if RETRY:
            same_threshold = ~misjudged
        if same_threshold:
            row_found = collect_runs(
                rows_ptr + row * row_stride, col_stride, first.to(tl.int32),
                (first + length).to(tl.int32), threshold, runs, SEGMENTS,
                SLOTS, VECTOR, KEY_BITS, CONTIGUOUS, RAW_HITS, PREFETCH,
            )  # fmt: skip
            total = tl.sum(row_found, axis=0)
        finish_row(
            rows_ptr + row * row_stride, col_stride, first, length, seg_ptr, threshold,
            row_found, total, target, runs, keys_row, columns_row, out_row, values_row,
            column_offset, width, neg_inf_key, out_values_ptr.dtype.element_ty, CAPACITY,
            SAMPLE_CHUNKS, SAMPLE_CHUNK, SEGMENTS, SLOTS, VECTOR, PACK, ROW_BLOCK, KEY_BITS,
            FROM_END, SORT_BLOCK, CONTIGUOUS, 3, RAW_HITS, PREFETCH, 0, RETRY,
        )  # fmt: skip
