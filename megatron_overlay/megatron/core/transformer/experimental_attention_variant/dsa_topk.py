# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Explicit top-k selection for the DSA indexer: backends and tie policies.

For on-policy RL the trainer must select exactly the keys the inference engine selects.
The indexer's ReLU-sum scores have large plateaus of exact ties (many 0.0), so the tie
policy decides the selected set. This module makes the selection explicit:

* ``select_topk(scores, k, backend=..., deterministic=..., tie_break=...)`` is the one
  entry point. It returns ``(values, indices)`` of width ``min(k, n)``:
  - ``indices`` are int32, in ascending column order, and a slot whose score is ``-inf``
    (masked, or padding when ``k`` exceeds the visible keys) is ``-1``; padding comes last;
  - ``values`` are the scores exactly as computed (no bias is added to break ties), with
    ``-inf`` for padding;
  - tie policy 1 ("small") keeps, among keys equal to the k-th largest score, the smallest
    columns; 2 ("large") the largest; 0 leaves it to the backend. Scores compare by their
    bit patterns, as FlashInfer does: ``-0.0`` ranks below ``+0.0``;
  - NaN ranks as ``-inf`` on every path: never selected over a real score, and reported as
    padding (``-1``, value ``-inf``) when selected.
* ``torch`` backend: exact for every policy on CPU and GPU (policy 0 behaves as 1), and
  deterministic by construction. On CUDA (k up to 4096, rows up to 256K scores) the
  segmented Triton select reads each row once in one launch: a sampled threshold admits a
  few thousand candidates (runs of the row, each appending to its own buffer in column
  order; a row the sample misjudged gets a second threshold and pass), a radix search
  over their bits finds the exact k-th key and the policy's ties,
  and the row is written in its final order (``dsa_topk_triton.select_rows_filtered``);
  otherwise one Triton program per row selects from ``topk(k+1)``'s candidates.
  Elsewhere a float ``topk`` of width k+1 settles every row without a
  tie at the k-th score; rows with boundary ties take one ``topk`` over order-preserving
  integer keys to find the k-th value and fill the remaining slots with ties in column
  order. No full sort of a row.
* ``flashinfer`` backend: ``flashinfer.top_k(..., sorted=False, deterministic=...,
  tie_break=..., dsa_graph_safe=True)`` on CUDA, with the keywords detected at run time;
  NaN is replaced by ``-inf`` first (FlashInfer itself ranks a NaN above ``+inf``).

``DSAttention`` reads the policy from ``TransformerConfig`` (``policy_from_config``); with
no backend configured (the default) upstream's selection runs unchanged.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch

BACKENDS = ("torch", "flashinfer")
TIE_BREAK_UNSET = 0
TIE_BREAK_SMALL = 1
TIE_BREAK_LARGE = 2
TIE_BREAKS = (TIE_BREAK_UNSET, TIE_BREAK_SMALL, TIE_BREAK_LARGE)

# tie_break arrived in FlashInfer 0.6.9 and dsa_graph_safe in 0.6.10.
FLASHINFER_MIN_VERSION = "0.6.10"
FLASHINFER_TOPK_KEYWORDS = ("sorted", "deterministic", "tie_break", "dsa_graph_safe")
# FlashInfer's tie-break / graph-safe top-k kernels handle at most this many keys per row.
FLASHINFER_MAX_K = 2048

# Bound on the elements of one row chunk, so the integer keys and tie counts of a
# 4096 x 128K score matrix stay a few hundred MB instead of several GB.
_CHUNK_ELEMENTS = 1 << 25


@dataclass(frozen=True)
class TopkPolicy:
    """How the indexer selects its top-k keys when a backend is configured."""

    backend: str
    deterministic: bool = False
    tie_break: int = TIE_BREAK_UNSET


def policy_from_config(config: Any) -> Optional[TopkPolicy]:
    """Return the configured policy, or None when upstream's selection should run.

    Read with getattr: configs built without the new fields (e.g. SimpleNamespace configs in
    upstream's tests) keep the default behaviour.
    """
    backend = getattr(config, "dsa_indexer_topk_backend", None)
    if backend is None:
        return None
    return TopkPolicy(
        backend=backend,
        deterministic=bool(getattr(config, "dsa_indexer_topk_deterministic", False)),
        tie_break=int(getattr(config, "dsa_indexer_topk_tie_break", TIE_BREAK_UNSET)),
    )


def validate_config(config: Any) -> None:
    """Reject top-k option combinations that cannot work (TransformerConfig.__post_init__).

    The torch backend implements deterministic output and both tie policies exactly, so it
    accepts them; without an explicit backend they are rejected, since upstream's kernels
    do not honour them.
    """
    backend = config.dsa_indexer_topk_backend
    deterministic = config.dsa_indexer_topk_deterministic
    tie_break = config.dsa_indexer_topk_tie_break
    _check_option_types(backend, deterministic, tie_break)
    if backend is None and not deterministic and tie_break == TIE_BREAK_UNSET:
        return
    variant = config.experimental_attention_variant
    # DeepSeek-V4 / CSA select keys with their own compressed indexer: upstream dev's
    # 'dsv4_hybrid', and on the fork's v1 branch 'dsv4' or dsv4_mode on a 'dsa' config.
    dsv4 = variant in ("dsv4_hybrid", "dsv4") or getattr(config, "dsv4_mode", False) is True
    if variant != "dsa" or dsv4:
        hint = ""
        if dsv4:
            hint = " (the CSA / DeepSeek-V4 variant selects keys with its own compressed indexer)"
        raise ValueError(
            "dsa_indexer_topk_backend, dsa_indexer_topk_deterministic and "
            "dsa_indexer_topk_tie_break apply only to experimental_attention_variant='dsa'; "
            f"got experimental_attention_variant={variant!r}"
            f"{', dsv4_mode=True' if variant == 'dsa' else ''}{hint}."
        )
    if backend is None:
        raise ValueError(
            "dsa_indexer_topk_deterministic and dsa_indexer_topk_tie_break need an explicit "
            "dsa_indexer_topk_backend: 'flashinfer' (they are FlashInfer's top-k options) or "
            "'torch' (implements them exactly); the default kernels do not honour them."
        )
    topk = config.dsa_indexer_topk
    if backend == "flashinfer" and topk is not None and topk > FLASHINFER_MAX_K:
        raise ValueError(
            f"dsa_indexer_topk_backend='flashinfer' supports dsa_indexer_topk <= "
            f"{FLASHINFER_MAX_K} (its graph-safe tie-break kernels); got {topk}. "
            "Use dsa_indexer_topk_backend='torch' for larger k."
        )


def _check_option_types(backend: Any, deterministic: Any, tie_break: Any) -> None:
    """Types first: a string "false" must not pass as a truthy deterministic flag."""
    if backend is not None and (not isinstance(backend, str) or backend not in BACKENDS):
        raise ValueError(
            f"dsa_indexer_topk_backend must be None, 'torch' or 'flashinfer'; got {backend!r}."
        )
    if not isinstance(deterministic, bool):
        raise TypeError(
            "dsa_indexer_topk_deterministic must be a bool (True or False); got "
            f"{deterministic!r} of type {type(deterministic).__name__}."
        )
    if not isinstance(tie_break, int) or isinstance(tie_break, bool) or tie_break not in TIE_BREAKS:
        raise ValueError(
            "dsa_indexer_topk_tie_break must be the int 0 (unset), 1 (prefer small indices) or "
            f"2 (prefer large indices); got {tie_break!r} of type {type(tie_break).__name__}."
        )


def select_topk(
    scores: torch.Tensor,
    k: int,
    *,
    backend: str,
    deterministic: bool = False,
    tie_break: int = TIE_BREAK_UNSET,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Select the top-k scores along the last dimension; see the module docstring."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown top-k backend {backend!r}; expected one of {BACKENDS}.")
    if isinstance(tie_break, bool) or tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}; got {tie_break!r}.")
    if k < 0:
        raise ValueError(f"k must be non-negative; got {k}.")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be floating point; got {scores.dtype}.")
    n = scores.size(-1)
    width = min(k, n)
    lead = scores.shape[:-1]
    rows = scores.reshape(math.prod(lead), n)  # -1 is ambiguous when n == 0
    if width == 0 or rows.size(0) == 0:
        indices = torch.empty(rows.size(0), width, dtype=torch.int64, device=scores.device)
        values, indices = _finalize(rows, indices)
    elif backend == "torch":
        values, indices = _torch_select_ordered(rows, width, tie_break == TIE_BREAK_LARGE)
    else:
        values, indices = _finalize(rows, _flashinfer_select(rows, width, deterministic, tie_break))
    return values.reshape(*lead, width), indices.reshape(*lead, width)


def _finalize(rows: torch.Tensor, indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Gather values, mark -inf (and NaN) slots -1 with value -inf, order by column with the
    -1 padding last. On CUDA one Triton program a row does it (one read of the selected
    scores, no segmented sort and eight passes over [rows, k])."""
    triton_rows = _triton_rows() if rows.is_cuda else None
    if triton_rows is not None and triton_rows.finalizes(rows, indices.size(-1)):
        return triton_rows.finalize_rows(rows, indices)
    return _finalize_with_torch(rows, indices)


def _finalize_with_torch(
    rows: torch.Tensor, indices: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """_finalize in torch operations (CPU, or k above the Triton program's sort)."""
    n = rows.size(-1)
    values = rows.gather(-1, indices.long())
    padding = torch.isneginf(values) | torch.isnan(values)
    column = indices.to(torch.int32)
    order_key = torch.where(padding, torch.full_like(column, n), column)
    order_key, order = order_key.sort(dim=-1)
    values = values.gather(-1, order).masked_fill(padding.gather(-1, order), float("-inf"))
    indices = torch.where(order_key == n, torch.full_like(order_key, -1), order_key)
    return values, indices


def _order_key(rows: torch.Tensor) -> torch.Tensor:
    """Integers that order like the floats' bit patterns (so -0.0 < +0.0)."""
    if rows.dtype == torch.float64:
        bits, sign_shift, magnitude = rows.view(torch.int64), 63, 0x7FFFFFFFFFFFFFFF
    else:
        # float16 / bfloat16 widen to float32 exactly, keeping order and the sign of zero.
        bits, sign_shift, magnitude = rows.float().view(torch.int32), 31, 0x7FFFFFFF
    # Negative floats order backwards: flip their magnitude bits (in place: one temporary).
    key = bits >> sign_shift
    key &= magnitude
    key ^= bits
    return key


def _torch_select_ordered(
    rows: torch.Tensor, width: int, prefer_large: bool
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The torch backend's final (values, indices). On CUDA the Triton program orders its own
    row (k up to MAX_ORDERED_WIDTH), which saves _finalize's sort and gathers: the filtered
    select (one pass over the row, no torch.topk) for k up to MAX_FILTER_WIDTH, else the
    selection from topk(k+1)'s candidates."""
    triton_rows = _triton_rows() if rows.is_cuda else None
    if triton_rows is not None and triton_rows.orders(rows, width):
        if triton_rows.filters(rows, width):
            return triton_rows.select_rows_filtered(rows, width, prefer_large)
        return triton_rows.select_rows_ordered(rows, width, prefer_large)
    return _finalize(rows, _torch_select(rows, width, prefer_large))


def candidate_slots(width: int, n: int) -> int:
    """Candidate scratch of the filtered CUDA select per row of n scores, in (int32 key,
    int32 column) pairs."""
    triton_rows = _triton_rows()
    return triton_rows.scratch_slots(width, n) if triton_rows is not None else 0


def selects_in_bounds(
    device: torch.device, dtype: torch.dtype, width: int, backend: str, n: int
) -> bool:
    """Whether ``select_topk_in_bounds`` reads each row's bounds itself (no masking pass)
    for rows of n scores."""
    if backend != "torch" or device.type != "cuda":
        return False
    triton_rows = _triton_rows()
    return (
        triton_rows is not None
        and dtype in triton_rows.KEY_BITS_OF
        and 0 < width <= triton_rows.MAX_FILTER_WIDTH
        and n <= triton_rows.MAX_FILTER_ROW
    )


def select_topk_in_bounds(
    rows: torch.Tensor,
    width: int,
    starts: Optional[torch.Tensor],
    ends: Optional[torch.Tensor],
    *,
    column_offset: int = 0,
    backend: str,
    deterministic: bool = False,
    tie_break: int = TIE_BREAK_UNSET,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``select_topk`` of each row of ``rows`` [r, n] restricted to its columns
    ``[starts[i], ends[i])`` (the others count as -inf; None: the rows are masked already),
    with ``column_offset`` added to the returned columns and the width ``width`` even past
    ``n`` (-1 / -inf padding): the selection of a window of a wider score row."""
    in_bounds = selects_in_bounds(rows.device, rows.dtype, width, backend, rows.size(-1))
    if in_bounds and starts is not None:
        return _triton_rows().select_rows_filtered(
            rows, width, tie_break == TIE_BREAK_LARGE, starts, ends, column_offset
        )
    n = rows.size(-1)
    if starts is not None:
        columns = torch.arange(n, device=rows.device)
        outside = (columns < starts.unsqueeze(-1)) | (columns >= ends.unsqueeze(-1))
        rows = rows.masked_fill(outside, float("-inf"))
    values, indices = select_topk(
        rows, width, backend=backend, deterministic=deterministic, tie_break=tie_break
    )
    indices = torch.where(indices >= 0, indices + column_offset, indices)
    if indices.size(-1) < width:  # the window is narrower than the selection
        pad = width - indices.size(-1)
        indices = torch.nn.functional.pad(indices, (0, pad), value=-1)
        values = torch.nn.functional.pad(values, (0, pad), value=float("-inf"))
    return values, indices


def _torch_select(rows: torch.Tensor, width: int, prefer_large: bool) -> torch.Tensor:
    """Exact tie-policy top-k.

    On CUDA (float32 / 16-bit) one Triton program per row selects (dsa_topk_triton). Elsewhere
    one float topk of width k+1 settles every row whose k-th score is strictly above the next
    one and is not a signed zero (where float comparison and bit order disagree): its top k+1
    minus the smallest is the answer under every policy. Rows whose k-th score is -inf are
    settled too (the rest of the row is padding). Rows with ties at the boundary, or with a
    NaN (which topk ranks first), take the exact integer-key path.
    """
    rows_count, n = rows.shape
    if width == n:
        return torch.arange(n, device=rows.device).expand(rows_count, n)
    triton_rows = _triton_rows() if rows.is_cuda else None
    if triton_rows is not None and triton_rows.handles(rows):
        return triton_rows.select_rows(rows, width, prefer_large)
    values, indices = rows.topk(width + 1, dim=-1, sorted=False)
    lowest = values.topk(2, dim=-1, largest=False, sorted=True)
    below, kth = lowest.values[:, 0], lowest.values[:, 1]
    settled = ((kth > below) & (kth != 0)) | torch.isneginf(kth)
    settled &= ~values.isnan().any(dim=-1)
    slot = torch.arange(width, device=rows.device)
    chosen = indices.gather(-1, slot + (slot >= lowest.indices[:, :1]))  # drop the (k+1)-th
    unsettled = (~settled).nonzero().squeeze(1)
    if unsettled.numel() > 0:
        chosen[unsettled] = _exact_select(rows.index_select(0, unsettled), width, prefer_large)
    return chosen


@functools.lru_cache(maxsize=1)
def _triton_rows():
    """The CUDA selection module, or None without Triton (then the torch path runs)."""
    try:
        from megatron.core.transformer.experimental_attention_variant import dsa_topk_triton
    except ImportError:
        return None
    return dsa_topk_triton


def _exact_select(rows: torch.Tensor, width: int, prefer_large: bool) -> torch.Tensor:
    """The integer-key path, a chunk of rows at a time to bound the temporaries."""
    chunk = max(1, _CHUNK_ELEMENTS // rows.size(-1))
    return torch.cat(
        [
            _exact_select_chunk(rows[start : start + chunk], width, prefer_large)
            for start in range(0, rows.size(0), chunk)
        ]
    )


def _exact_select_chunk(rows: torch.Tensor, width: int, prefer_large: bool) -> torch.Tensor:
    """k-th value threshold: take every key strictly above it, fill the rest with its ties."""
    n = rows.size(-1)
    key = _order_key(rows.masked_fill(rows.isnan(), float("-inf")))  # NaN ranks as -inf
    top_key, top_idx = key.topk(width, dim=-1, sorted=False)
    kth = top_key.amin(dim=-1, keepdim=True)
    is_greater = top_key > kth
    tie_slots = width - is_greater.sum(dim=-1, keepdim=True)
    # The j-th tie of a row sits where the running count of ties first reaches j.
    tie_count = (key == kth).cumsum(dim=-1, dtype=torch.int32)
    ties = tie_count[:, -1:]
    ordinal = torch.arange(1, width + 1, dtype=torch.int32, device=rows.device).expand_as(top_idx)
    first = ties - tie_slots + 1 if prefer_large else torch.ones_like(ties)
    wanted = (first + ordinal - 1).clamp(max=ties).to(torch.int32).contiguous()
    tie_cols = torch.searchsorted(tie_count, wanted)
    sentinel = torch.full_like(top_idx, n)
    candidates = torch.cat(
        [
            torch.where(is_greater, top_idx, sentinel),
            torch.where(ordinal <= tie_slots, tie_cols, sentinel),
        ],
        dim=-1,
    )
    # Exactly `width` candidates are real columns; sorting puts them first.
    return candidates.sort(dim=-1).values[:, :width]


@functools.lru_cache(maxsize=1)
def _flashinfer_top_k():
    """flashinfer.top_k, checked for the keywords this backend relies on."""
    try:
        import flashinfer
    except ImportError as exc:
        raise RuntimeError(
            "dsa_indexer_topk_backend='flashinfer' needs FlashInfer: pip install "
            f"'flashinfer-python>={FLASHINFER_MIN_VERSION}' (import failed: {exc})."
        ) from exc
    top_k = getattr(flashinfer, "top_k", None)
    version = getattr(flashinfer, "__version__", "unknown")
    params = inspect.signature(top_k).parameters if top_k is not None else {}
    missing = [name for name in FLASHINFER_TOPK_KEYWORDS if name not in params]
    if top_k is None or missing:
        raise RuntimeError(
            f"flashinfer {version} has no top_k with keyword(s) {', '.join(missing) or 'top_k'}; "
            f"dsa_indexer_topk_backend='flashinfer' needs flashinfer-python >= "
            f"{FLASHINFER_MIN_VERSION} (tie_break since 0.6.9, dsa_graph_safe since 0.6.10)."
        )
    return top_k


def _flashinfer_select(
    rows: torch.Tensor, width: int, deterministic: bool, tie_break: int
) -> torch.Tensor:
    """FlashInfer's graph-safe top-k with its deterministic and tie-break modes."""
    if not torch.cuda.is_available() or not rows.is_cuda:
        raise RuntimeError(
            "dsa_indexer_topk_backend='flashinfer' runs on CUDA tensors; got scores on "
            f"{rows.device} (CUDA available: {torch.cuda.is_available()}). "
            "Use dsa_indexer_topk_backend='torch' without a GPU."
        )
    if width > FLASHINFER_MAX_K:
        raise ValueError(
            f"FlashInfer's graph-safe top-k supports k <= {FLASHINFER_MAX_K}; got {width}."
        )
    if rows.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"FlashInfer top-k takes float32/float16/bfloat16; got {rows.dtype}.")
    # FlashInfer ranks scores by bit pattern, so a NaN would outrank +inf: rank it as -inf.
    finite_or_inf = rows.nan_to_num(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    _, indices = _flashinfer_top_k()(
        finite_or_inf,
        width,
        sorted=False,
        deterministic=deterministic,
        tie_break=tie_break,
        dsa_graph_safe=True,
    )
    return indices
