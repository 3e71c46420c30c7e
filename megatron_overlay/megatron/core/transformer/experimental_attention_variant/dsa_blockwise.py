# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Memory-bounded DSA indexer scoring, top-k selection and indexer loss, in blocks of rows.

With ``dsa_indexer_topk_backend`` set, the indexer never materialises its dense
``[sq, b, heads, sk]`` intermediate nor the ``[b, sq, sk]`` scores. Query rows are processed
in blocks whose size comes from a memory budget and the shapes (``rows_per_block``):

* selection (``select_topk``): score a block of rows (the indexer's ReLU-weighted head sum in
  float32, with the same masks as upstream's ``fused_qk_topk_naive``: additive mask,
  packed/varlen bounds and key positions, which also carry context-parallel offsets), select
  its top-k with the configured backend and tie policy (``dsa_topk.select_topk``), keep only
  the int32 indices. Selection is row-wise: a row's keys depend only on its scores. The
  fused scorer gives a row the same score bits in any block (upstream's, below). The torch
  scorer's matmul may round a score differently for another block shape, so its blocks
  take a fixed budget, never one from free memory: the same input gives the same keys run
  after run, but where two keys score within a rounding step of each other, the one kept
  may differ from a selection over the whole score matrix at once.
* indexer loss (``indexer_loss``): an autograd function over exactly the given indices. The
  sparse loss computes index and attention logits only at the selected keys (gather); the
  dense loss runs block by block. The backward recomputes each block and differentiates it,
  so it never re-selects and never holds more than one block.

Scorers: TileLang's fused indexer-logits kernel (``indexer_fwd_interface``) scores a block of
rows without selecting, so it is used when ``dsa_kernel_backend="tilelang"`` is available and
the inputs are bf16; otherwise upstream's ``_compute_index_scores`` runs on the block's rows.
cuDNN's scorer masks causally from the chunk's own first row, so it cannot score an arbitrary
block under DSAttention's masks; with cuDNN the torch scorer runs. Each layer logs once, at
INFO, which scorer and selector it uses.

Blocks are sized by the scorer in use (TileLang holds one float32 score per key and row, the
torch scorer a [heads, sk] product per row) within a budget (``block_budget``): for the fused
scorer a share of the device's free memory, for the torch scorer the fixed default. When the masks are per-row key bounds over identity key positions
(causal rows, packed sequences), a block scores only the columns its rows can see (the union
of their bounds) and hands the bounds to the selection, which reads each row's own range
once: no masking pass, and no second pass over a [rows, sk] block (``dsa_topk``'s filtered
Triton select on CUDA). TileLang sees the same rows, bounds and key order as in upstream's
own call (blocks start on multiples of ``ROW_ALIGN``), so its scores are upstream's bit for
bit. With TileLang, the sparse indexer loss runs on upstream's fused kernels too (target,
KL, indexer backward) over exactly the selected indices (``FusedSparseIndexerLoss``).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Optional, Tuple

import torch

from megatron.core.transformer.experimental_attention_variant import dsa_topk, dsa_upstream

# Upstream's helpers on 0.19+, the same definitions on the v1 DSA of 0.16-0.18.
dsa_indexer_loss = dsa_upstream.dsa_indexer_loss
dsa_layout = dsa_upstream.dsa_layout
dsa_masking = dsa_upstream.dsa_masking

_LOGGER = logging.getLogger(__name__)

# Extra memory one block may use (scores, their intermediates, selection scratch) when the
# free device memory cannot be read (CPU), and the least a block gets otherwise.
DEFAULT_BUDGET_BYTES = 2 << 30
# On CUDA a block may use this share of the free memory (the allocator's cache included).
FREE_MEMORY_SHARE = 4
# A block of this many rows keeps the device busy (thousands of programs a launch); larger
# blocks only hold more memory, so blocks stop here.
MAX_BLOCK_ROWS = 4096
# Blocks start on multiples of this: TileLang's indexer kernel scores rows in groups of
# max(1, 128 // heads), and aligned blocks group them as upstream's own call does.
ROW_ALIGN = 128
_FP32 = 4
# Live float32 copies per scored element: the head-wise product and its ReLU/weighted copy
# (upstream's scorer), or the autograd graph of the same (three) when a loss block is
# differentiated.
_SCORE_COPIES, _SCORE_COPIES_WITH_GRAD = 2, 3
# Live [rows, sk] float32 copies beside them: summed scores, masked scores, selection keys,
# softmax/log-softmax and their masks.
_ROW_COPIES = 6

TORCH_SCORER = "torch (upstream _compute_index_scores on each block of rows)"
TILELANG_SCORER = "tilelang (fused indexer_fwd_interface on each block of rows)"


@dataclass(frozen=True)
class BlockwisePlan:
    """How a layer scores and selects when a top-k backend is configured."""

    policy: dsa_topk.TopkPolicy
    # None: block_budget's (a share of the free memory for the fused scorer).
    budget_bytes: Optional[int] = None
    use_tilelang: bool = False
    layer: Optional[int] = None


def block_budget(
    budget_bytes: Optional[int], device: torch.device, follows_free_memory: bool = True
) -> int:
    """Bytes a block may use: the given budget, else on CUDA a share of the free memory
    (at least DEFAULT_BUDGET_BYTES), else DEFAULT_BUDGET_BYTES. `follows_free_memory`
    False: always the default where none is given (a block's shape may change its scores'
    rounding, and free memory changes from run to run)."""
    if budget_bytes is not None:
        return budget_bytes
    if device.type != "cuda" or not follows_free_memory:
        return DEFAULT_BUDGET_BYTES
    try:
        free, _ = torch.cuda.mem_get_info(device)
    except RuntimeError:
        return DEFAULT_BUDGET_BYTES
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return max(DEFAULT_BUDGET_BYTES, (free + cached) // FREE_MEMORY_SHARE)


_logged_paths: set = set()


def plan_from_config(config: Any, layer: Optional[int] = None) -> Optional[BlockwisePlan]:
    """The layer's plan, or None when no backend is set (upstream's path runs unchanged)."""
    policy = dsa_topk.policy_from_config(config)
    if policy is None:
        return None
    use_tilelang = getattr(config, "dsa_kernel_backend", "none") == "tilelang"
    return BlockwisePlan(policy=policy, use_tilelang=use_tilelang, layer=layer)


def _log_path_once(plan: BlockwisePlan, scorer: str, rows: int, budget: int) -> None:
    """Say once per layer which scorer and selector it uses (no silent change of path)."""
    key = (plan.layer, scorer)
    if key in _logged_paths:
        return
    _logged_paths.add(key)
    policy = plan.policy
    _LOGGER.info(
        "DSA indexer layer %s: scores by %s, top-k by the %s backend (tie_break=%d, "
        "deterministic=%s), %d query rows per block within %d MiB",
        "?" if plan.layer is None else plan.layer,
        scorer,
        policy.backend,
        policy.tie_break,
        policy.deterministic,
        rows,
        budget >> 20,
    )


def rows_per_block(bytes_per_row: int, sq: int, budget_bytes: int) -> int:
    """Query rows per block: as many as fit the budget, at least one, at most ``sq``."""
    return max(1, min(sq, budget_bytes // max(1, bytes_per_row)))


def _aligned_rows(rows: int) -> int:
    """At most MAX_BLOCK_ROWS, and a multiple of ROW_ALIGN once that large."""
    rows = min(rows, MAX_BLOCK_ROWS)
    return rows - rows % ROW_ALIGN if rows >= ROW_ALIGN else rows


def _blocks(sq: int, rows: int) -> Iterator[Tuple[int, int]]:
    for start in range(0, sq, rows):
        yield start, min(start + rows, sq)


# =====================================================================================
# Scoring and selection
# =====================================================================================


def _tilelang_scorer() -> Optional[Callable]:
    try:
        from megatron.core.transformer.experimental_attention_variant.ops import indexer
    except (ImportError, OSError):
        return None
    return indexer.indexer_fwd_interface if indexer.HAVE_TILELANG_INDEXER_FWD else None


@dataclass(frozen=True)
class Scorer:
    """How a block is scored: ``score(q_rows, weights_rows, k_window, starts, ends, clean)``
    gives [b, rows, window] float32 (starts/ends: int32 key bounds in the window's columns;
    ``clean`` asks for -inf outside them), and the bytes it holds per query row per key."""

    name: str
    score: Callable
    bytes_per_key: Callable[[int], int]  # index heads -> bytes per (row, key)
    fused: bool


def _score_rows_tilelang(fused: Callable, q, weights, k, starts, ends, clean: bool, use_relu):
    """[b, rows, sk] float32 from TileLang's fused indexer logits (no selection). Outside a
    row's bounds the logits are -inf with ``clean``, unspecified without."""
    logits = [
        fused(
            q[:, bi].contiguous(),
            k[:, bi].contiguous(),
            weights[:, bi],
            starts,
            ends,
            clean_logits=clean,
            use_relu=use_relu,
        )
        for bi in range(q.size(1))
    ]
    # One sequence (the usual case at long contexts): a view, not a copy of the whole block.
    return logits[0].unsqueeze(0) if len(logits) == 1 else torch.stack(logits)


def _pick_scorer(plan: BlockwisePlan, q, k, use_relu: bool) -> Scorer:
    if plan.use_tilelang and q.dtype == k.dtype == torch.bfloat16:
        fused = _tilelang_scorer()
        if fused is not None:
            return Scorer(
                TILELANG_SCORER,
                lambda qr, wr, kk, st, en, clean: _score_rows_tilelang(
                    fused, qr, wr, kk, st, en, clean, use_relu
                ),
                lambda heads: _FP32,
                fused=True,
            )
    return Scorer(
        TORCH_SCORER,
        lambda qr, wr, kk, st, en, clean: dsa_upstream.index_scores(qr, wr, kk, use_relu),
        lambda heads: _FP32 * (_SCORE_COPIES * heads + _ROW_COPIES),
        fused=False,
    )


@dataclass(frozen=True)
class RowMasks:
    """The masks of one forward, sliceable by query rows.

    Either an additive float mask ([sq, sk] or [b, sq, sk]) or per-row key bounds
    ``[starts, ends)`` over ``key_positions`` (packed/varlen sequences, context parallelism).
    ``explicit_positions`` says the caller gave key positions; without them a key's position
    is its column, so a row's visible keys are the columns [start, end).
    """

    mask: Optional[torch.Tensor] = None
    starts: Optional[torch.Tensor] = None
    ends: Optional[torch.Tensor] = None
    key_positions: Optional[torch.Tensor] = None
    explicit_positions: bool = False

    @classmethod
    def normalized(
        cls,
        mask: Optional[torch.Tensor] = None,
        varlen_starts: Optional[torch.Tensor] = None,
        varlen_ends: Optional[torch.Tensor] = None,
        key_positions: Optional[torch.Tensor] = None,
        *,
        sk: int,
        device: torch.device,
    ) -> RowMasks:
        """From the mask arguments of upstream's ``fused_qk_topk_naive`` and
        ``FusedDSAIndexerLoss``, validated and normalized as upstream does."""
        starts, ends, positions = dsa_masking.normalize_varlen_bounds(
            mask=mask,
            varlen_starts=varlen_starts,
            varlen_ends=varlen_ends,
            key_positions=key_positions,
            sk=sk,
            device=device,
        )
        return cls(
            mask=mask,
            starts=starts,
            ends=ends,
            key_positions=positions,
            explicit_positions=key_positions is not None,
        )

    @property
    def column_bounds(self) -> bool:
        """Whether every row sees a contiguous range of columns, given by starts/ends (or,
        with no mask at all, every column)."""
        return self.mask is None and not (self.starts is not None and self.explicit_positions)

    def additive_rows(self, start: int, end: int) -> torch.Tensor:
        """The additive mask's rows: [1 or b, rows, sk]."""
        rows = self.mask[..., start:end, :]
        return rows.unsqueeze(0) if rows.ndim == 2 else rows

    def apply_to_scores(self, scores: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Upstream's selection masking (``fused_qk_topk_naive``) on rows [start, end)."""
        if self.starts is not None:
            return dsa_masking.apply_starts_ends_mask_to_scores(
                scores, self.starts[start:end], self.ends[start:end], self.key_positions
            )
        if self.mask is not None:
            assert self.mask.dtype == scores.dtype, "Mask dtype must match index scores dtype"
            return scores + self.additive_rows(start, end)
        return scores


def _windows(masks: RowMasks, blocks: list, sk: int) -> list:
    """Per block, the key columns [first, last) its rows can see (one host sync for all)."""
    if not masks.column_bounds or masks.starts is None:
        return [(0, sk)] * len(blocks)
    firsts = torch.stack([masks.starts[start:end].amin() for start, end in blocks])
    lasts = torch.stack([masks.ends[start:end].amax() for start, end in blocks])
    windows = []
    for first, last in zip(firsts.tolist(), lasts.tolist()):
        first = min(max(first, 0), sk)
        windows.append((first, min(max(last, first), sk)))
    return windows


def _window_bounds(masks: RowMasks, start: int, end: int, window: Tuple[int, int], device):
    """int32 [rows] key bounds of rows [start, end) in the window's columns."""
    first, last = window
    if masks.starts is None:
        starts = torch.zeros(end - start, dtype=torch.int32, device=device)
        return starts, torch.full_like(starts, last - first)
    starts = (masks.starts[start:end] - first).clamp(0, last - first)
    ends = torch.maximum((masks.ends[start:end] - first).clamp(0, last - first), starts)
    return starts.to(torch.int32).contiguous(), ends.to(torch.int32).contiguous()


def select_topk(
    q: torch.Tensor,
    k: torch.Tensor,
    weights: torch.Tensor,
    index_topk: int,
    plan: BlockwisePlan,
    *,
    mask: Optional[torch.Tensor] = None,
    varlen_starts: Optional[torch.Tensor] = None,
    varlen_ends: Optional[torch.Tensor] = None,
    key_positions: Optional[torch.Tensor] = None,
    use_relu: bool = True,
) -> torch.Tensor:
    """int32 top-k indices [b, sq, min(index_topk, sk)], scored and selected block by block.

    q: [sq, b, heads, dim], k: [sk, b, dim], weights: [sq, b, heads]; the masks as in
    upstream's ``fused_qk_topk_naive``. Equal to selecting from the full score matrix with
    ``dsa_topk.select_topk`` wherever a block's scores are the full matrix's bits: always
    with the fused scorer; with the torch scorer, where its matmul rounds no score
    differently in a block (the module's docstring).
    """
    masks = RowMasks.normalized(
        mask, varlen_starts, varlen_ends, key_positions, sk=k.size(0), device=q.device
    )
    return _select_rows(q, k, weights, index_topk, plan, masks, use_relu)


@dataclass
class _Selection:
    """The blocks one selection ran over, for a loss that follows it."""

    indices: torch.Tensor  # [b, sq, width] int32
    values: Optional[torch.Tensor]  # [b, sq, width] float32 scores at them (-inf padding)
    blocks: list


def _select_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    weights: torch.Tensor,
    index_topk: int,
    plan: BlockwisePlan,
    masks: RowMasks,
    use_relu: bool,
) -> torch.Tensor:
    """``select_topk`` on masks already normalized."""
    return _select_blocks(q, k, weights, index_topk, plan, masks, use_relu, False).indices


def _select_blocks(
    q: torch.Tensor,
    k: torch.Tensor,
    weights: torch.Tensor,
    index_topk: int,
    plan: BlockwisePlan,
    masks: RowMasks,
    use_relu: bool,
    keep_values: bool,
) -> _Selection:
    """Score and select block by block; with ``keep_values`` also the selected scores."""
    sq, b, heads = q.size(0), q.size(1), q.size(2)
    sk = k.size(0)
    width = min(index_topk, sk)
    out = torch.empty((b, sq, width), dtype=torch.int32, device=q.device)
    values = torch.empty((b, sq, width), dtype=torch.float32, device=q.device) if keep_values else None
    if width == 0 or sq == 0:
        return _Selection(out, values, [])
    scorer = _pick_scorer(plan, q, k, use_relu)
    budget = block_budget(plan.budget_bytes, q.device, follows_free_memory=scorer.fused)
    per_row = b * sk * scorer.bytes_per_key(heads)
    if scorer.fused:  # beside the scores: the selection's candidates and outputs
        per_row += b * _FP32 * 2 * (dsa_topk.candidate_slots(width, sk) + width)
    rows = _aligned_rows(rows_per_block(per_row, sq, budget))
    _log_path_once(plan, scorer.name, rows, budget)
    policy = plan.policy
    blocks = list(_blocks(sq, rows))
    windows = _windows(masks, blocks, sk)
    bounded = masks.column_bounds
    # The filtered Triton select reads each row's bounds itself; other selectors need the
    # keys outside them masked (TileLang's clean pass, or a masked fill).
    selects_in_bounds = bounded and dsa_topk.selects_in_bounds(
        q.device, torch.float32, width, policy.backend, sk
    )
    with torch.no_grad():
        for (start, end), window in zip(blocks, windows):
            first, last = window
            if bounded:
                starts, ends = _window_bounds(masks, start, end, window, q.device)
            else:
                starts = torch.zeros(end - start, dtype=torch.int32, device=q.device)
                ends = torch.full_like(starts, sk)
            if last <= first:  # no row of the block sees a key
                out[:, start:end] = -1
                if values is not None:
                    values[:, start:end] = float("-inf")
                continue
            scores = scorer.score(
                q[start:end],
                weights[start:end],
                k[first:last],
                starts,
                ends,
                bounded and not selects_in_bounds,
            )
            if bounded:
                block_values, indices = dsa_topk.select_topk_in_bounds(
                    scores.reshape(b * (end - start), last - first),
                    width,
                    starts.repeat(b) if (selects_in_bounds or not scorer.fused) else None,
                    ends.repeat(b) if (selects_in_bounds or not scorer.fused) else None,
                    column_offset=first,
                    backend=policy.backend,
                    deterministic=policy.deterministic,
                    tie_break=policy.tie_break,
                )
            else:
                scores = masks.apply_to_scores(scores, start, end)
                block_values, indices = dsa_topk.select_topk(
                    scores,
                    index_topk,
                    backend=policy.backend,
                    deterministic=policy.deterministic,
                    tie_break=policy.tie_break,
                )
            out[:, start:end] = indices.view(b, end - start, width)
            if values is not None:
                values[:, start:end] = block_values.view(b, end - start, width)
            del scores, indices, block_values
    return _Selection(out, values, blocks)


# =====================================================================================
# Indexer loss on given indices
# =====================================================================================


@dataclass(frozen=True)
class LossSpec:
    """Everything of the indexer-loss call that is not a tensor with a gradient.

    ``masks`` as ``RowMasks.normalized`` makes them (the ones selection used);
    ``query_valid_rows`` as upstream takes it ([b, sq], [sq] or [t] bool), normalized to
    [b, sq] by ``indexer_loss``; ``non_compressed_lse`` ([b, heads, sq] float32, detached) is
    attention mass from keys left out of ``key``, as upstream's ``dev`` takes it.
    """

    softmax_scale: float
    loss_coeff: float
    sparse_loss: bool
    pg_collection: Any
    masks: RowMasks = RowMasks()
    query_valid_rows: Optional[torch.Tensor] = None
    calculate_per_token_loss: bool = False
    use_relu: bool = True
    budget_bytes: Optional[int] = None  # None: block_budget's share of the free memory
    non_compressed_lse: Optional[torch.Tensor] = None


def _gather_keys(key_b: torch.Tensor, safe: torch.Tensor) -> torch.Tensor:
    """key_b [sk, ...] at safe [rows, K] -> [rows, K, ...]."""
    return key_b.index_select(0, safe.reshape(-1)).view(*safe.shape, *key_b.shape[1:])


def _sparse_logits(q, weights, k, query, key, idx, spec: LossSpec):
    """Index and attention logits at the selected keys only.

    Returns (index [b, rows, K], attention [b, np, rows, K]) float32; ``idx`` is [b, rows, K]
    with -1 for empty slots (their logits are computed at key 0 and masked later).
    """
    safe = idx.clamp_min(0).long()
    index_rows, attention_rows = [], []
    shared_key = key.size(2) == 1 or key.stride(2) == 0  # one key head (absorbed MLA)
    for bi in range(q.size(1)):
        keys = _gather_keys(k[:, bi].float(), safe[bi])  # [rows, K, d]
        logits = torch.einsum("rhd,rkd->rhk", q[:, bi].float(), keys)
        if spec.use_relu:
            logits = torch.relu(logits)
        index_rows.append((logits * weights[:, bi].float().unsqueeze(-1)).sum(dim=1))
        query_b = query[:, bi].float()
        if shared_key:
            keys = _gather_keys(key[:, bi, 0].float(), safe[bi])
            attention = torch.einsum("rhd,rkd->hrk", query_b, keys)
        else:
            keys = _gather_keys(key[:, bi].float(), safe[bi])  # [rows, K, np, hd]
            attention = torch.einsum("rhd,rkhd->hrk", query_b, keys)
        attention_rows.append(attention * spec.softmax_scale)
    return torch.stack(index_rows), torch.stack(attention_rows)


def _sparse_valid(idx: torch.Tensor, start: int, spec: LossSpec) -> torch.Tensor:
    """[b, rows, K] bool: the slot holds a key that the row's mask lets it see."""
    masks = spec.masks
    valid = idx >= 0
    safe = idx.clamp_min(0).long()
    if masks.starts is not None:
        positions = masks.key_positions[safe]
        rows = slice(start, start + idx.size(1))
        return (
            valid
            & (positions >= masks.starts[rows].view(1, -1, 1))
            & (positions < masks.ends[rows].view(1, -1, 1))
        )
    if masks.mask is not None:
        rows = masks.additive_rows(start, start + idx.size(1)).expand(idx.size(0), -1, -1)
        return valid & torch.isfinite(rows.gather(-1, safe))
    row_ids = torch.arange(start, start + idx.size(1), device=idx.device).view(1, -1, 1)
    return valid & (safe <= row_ids)  # upstream's default causal mask


def _dense_logits(q, weights, k, query, key, start: int, spec: LossSpec):
    """Index [b, rows, sk] and attention [b, np, rows, sk] logits, masked, with validity."""
    masks = spec.masks
    rows, b, heads, dim = query.shape
    sk = key.size(0)
    index = dsa_upstream.index_scores(q, weights, k, use_relu=spec.use_relu)
    query_r = query.permute(1, 2, 0, 3).reshape(b * heads, rows, dim)
    key_r = key.permute(1, 2, 3, 0).reshape(b * heads, dim, sk)
    attention = (torch.bmm(query_r.float(), key_r.float()) * spec.softmax_scale).view(
        b, heads, rows, sk
    )
    end = start + rows
    if masks.starts is not None:
        index = masks.apply_to_scores(index, start, end)
        attention = dsa_masking.apply_starts_ends_mask_to_scores(
            attention, masks.starts[start:end], masks.ends[start:end], masks.key_positions
        )
        valid = dsa_masking.build_valid_mask_from_starts_ends(
            masks.starts[start:end], masks.ends[start:end], masks.key_positions
        )
        return index, attention, valid.unsqueeze(0).expand(b, rows, sk)
    if masks.mask is not None:
        additive = masks.additive_rows(start, end)
    else:
        row_ids = torch.arange(start, end, device=q.device).view(-1, 1)
        key_ids = torch.arange(sk, device=q.device).view(1, -1)
        additive = torch.zeros(rows, sk, device=q.device).masked_fill(key_ids > row_ids, -torch.inf)
        additive = additive.unsqueeze(0)
    index = index + additive
    attention = attention + additive.unsqueeze(1)
    return index, attention, torch.isfinite(additive).expand(b, rows, sk)


_TINY = torch.finfo(torch.float32).tiny


def _teacher_probabilities(
    attention: torch.Tensor, valid: torch.Tensor, outside: Optional[torch.Tensor]
) -> torch.Tensor:
    """Per-head attention probabilities [b, heads, rows, keys] over the row's valid keys;
    with ``outside`` ([b, heads, rows] log-sum-exp of keys not in ``key``) that mass joins
    the softmax denominator, so the probabilities sum to less than one."""
    valid = valid.unsqueeze(1).expand_as(attention)
    if outside is None:
        return dsa_masking.masked_softmax(attention, valid, dim=-1)
    logits = attention.masked_fill(~valid, float("-inf"))
    total = torch.logaddexp(outside.float(), torch.logsumexp(logits, dim=-1))
    return torch.where(valid, torch.exp(logits - total.unsqueeze(-1)), 0.0)


def _block_kl_sum(q, weights, k, query, key, idx, start: int, spec: LossSpec) -> torch.Tensor:
    """Sum over the block's valid rows of KL(attention target || indexer distribution)."""
    if spec.sparse_loss:
        index, attention = _sparse_logits(q, weights, k, query, key, idx, spec)
        valid = _sparse_valid(idx, start, spec)
    else:
        index, attention, valid = _dense_logits(q, weights, k, query, key, start, spec)
    outside = spec.non_compressed_lse
    if outside is not None:
        outside = outside[:, :, start : start + idx.size(1)]
    with torch.no_grad():  # the target depends on query/key only, which are detached
        target = _teacher_probabilities(attention, valid, outside).sum(dim=1)
        del attention
        if spec.pg_collection.tp.size() > 1:  # attention heads are split over TP ranks
            torch.distributed.all_reduce(target, group=spec.pg_collection.tp)
        if outside is None:
            target = dsa_indexer_loss.normalize_indexer_target(target)
        else:  # upstream's dev normalizes this case with the float32 tiny, not its epsilon
            target = target / target.sum(dim=-1, keepdim=True).clamp_min(_TINY)
    log_probs = dsa_masking.masked_log_softmax(index, valid, dim=-1)
    kl_per_row = dsa_indexer_loss.indexer_kl_per_row(target, log_probs)
    if spec.query_valid_rows is not None:
        rows = spec.query_valid_rows[:, start : start + idx.size(1)]
        kl_per_row = kl_per_row * rows.to(kl_per_row.dtype)
    return kl_per_row.sum()


def _loss_rows(q, query, key, topk_indices, spec: LossSpec) -> int:
    """Rows per loss block: the budget over one row's differentiated intermediates."""
    sq, b, index_heads, index_dim = q.shape
    heads, dim = query.size(2), query.size(3)
    if spec.sparse_loss:  # gathered keys and logits over the K selected keys
        columns = topk_indices.size(-1)
        per_column = index_dim + _SCORE_COPIES_WITH_GRAD * index_heads + heads * (dim + 3)
    else:  # index and attention logits over every key
        columns = key.size(0)
        per_column = _SCORE_COPIES_WITH_GRAD * index_heads + 3 * heads
    per_row = b * columns * _FP32 * (per_column + _ROW_COPIES)
    return min(rows_per_block(per_row, sq, block_budget(spec.budget_bytes, q.device)), MAX_BLOCK_ROWS)


class BlockwiseIndexerLoss(torch.autograd.Function):
    """The indexer KL loss on exactly ``topk_indices``, block by block in both directions."""

    @staticmethod
    def forward(ctx, q, weights, k, query, key, topk_indices, spec: LossSpec, rows: int):
        total = torch.zeros((), dtype=torch.float32, device=q.device)
        for start, end in _blocks(q.size(0), rows):
            total += _block_kl_sum(
                q[start:end],
                weights[start:end],
                k,
                query[start:end],
                key,
                topk_indices[:, start:end],
                start,
                spec,
            )
        scale = _loss_scale(spec, q.size(0), q.size(1), q.device)
        ctx.save_for_backward(q, weights, k, query, key, topk_indices)
        ctx.spec, ctx.rows, ctx.scale = spec, rows, scale
        return total * scale

    @staticmethod
    def backward(ctx, grad_loss):
        q, weights, k, query, key, topk_indices = ctx.saved_tensors
        spec = ctx.spec
        grad_q = torch.zeros_like(q, dtype=torch.float32)
        grad_weights = torch.zeros_like(weights, dtype=torch.float32)
        grad_k = torch.zeros_like(k, dtype=torch.float32)
        upstream = grad_loss * ctx.scale
        k_leaf = k.detach().requires_grad_()
        for start, end in _blocks(q.size(0), ctx.rows):
            with torch.enable_grad():
                q_block = q[start:end].detach().requires_grad_()
                w_block = weights[start:end].detach().requires_grad_()
                kl_sum = _block_kl_sum(
                    q_block,
                    w_block,
                    k_leaf,
                    query[start:end],
                    key,
                    topk_indices[:, start:end],
                    start,
                    spec,
                )
                gq, gw, gk = torch.autograd.grad(kl_sum, [q_block, w_block, k_leaf], upstream)
            grad_q[start:end] = gq
            grad_weights[start:end] = gw
            grad_k += gk
        return (
            grad_q.to(q.dtype),
            grad_weights.to(weights.dtype),
            grad_k.to(k.dtype),
            None,
            None,
            None,
            None,
            None,
        )


def _loss_scale(spec: LossSpec, sq: int, b: int, device) -> torch.Tensor:
    """loss_coeff over upstream's row count (valid rows, all rows, or 1 per token)."""
    if spec.calculate_per_token_loss:
        denominator = torch.ones((), dtype=torch.float32, device=device)
    elif spec.query_valid_rows is not None:
        denominator = spec.query_valid_rows.sum().to(torch.float32).clamp_min(1.0)
    else:
        denominator = torch.tensor(float(max(b * sq, 1)), device=device)
    return spec.loss_coeff / denominator


def indexer_loss_function(plan: BlockwisePlan) -> Callable[..., Tuple[torch.Tensor, torch.Tensor]]:
    """A drop-in for ``FusedDSAIndexerLoss.apply`` (same positional inputs, same result)
    that selects with the plan's backend and computes the loss in blocks of rows."""
    return functools.partial(indexer_topk_and_loss, plan=plan)


def indexer_topk_and_loss(
    q: torch.Tensor,
    weights: torch.Tensor,
    k: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    softmax_scale: float,
    topk: int,
    loss_coeff: float,
    mask: Optional[torch.Tensor],
    sparse_loss: bool,
    pg_collection: Any,
    varlen_starts: Optional[torch.Tensor] = None,
    varlen_ends: Optional[torch.Tensor] = None,
    key_positions: Optional[torch.Tensor] = None,
    query_valid_rows: Optional[torch.Tensor] = None,
    calculate_per_token_loss: bool = False,
    use_relu: bool = True,
    non_compressed_lse: Optional[torch.Tensor] = None,
    *,
    plan: BlockwisePlan,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``FusedDSAIndexerLoss.apply``'s inputs and result, memory-bounded: the plan's backend
    selects block by block, then the loss (and its backward) runs on exactly those indices.

    The inputs are the union of every upstream generation's, in upstream's order: 0.17-0.18
    pass the first 11, 0.19 the first 17, NVIDIA ``dev`` all 18 (``non_compressed_lse``).
    """
    masks = RowMasks.normalized(
        mask, varlen_starts, varlen_ends, key_positions, sk=k.size(0), device=q.device
    )
    fused = None
    if non_compressed_lse is None:  # upstream's fused target has no mass from outside `key`
        fused = _fused_loss_kernels(plan, q, k, query, key, masks, sparse_loss)
    if fused is not None:
        return FusedSparseIndexerLoss.apply(
            q,
            weights,
            k,
            query,
            key,
            FusedLossSpec(
                softmax_scale=softmax_scale,
                topk=topk,
                loss_coeff=loss_coeff,
                pg_collection=pg_collection,
                masks=masks,
                query_valid_rows=query_valid_rows,
                calculate_per_token_loss=calculate_per_token_loss,
                use_relu=use_relu,
                plan=plan,
                kernels=fused,
            ),
        )
    topk_indices = _select_rows(
        q.detach(), k.detach(), weights.detach(), topk, plan, masks, use_relu
    )
    spec = LossSpec(
        softmax_scale=softmax_scale,
        loss_coeff=loss_coeff,
        sparse_loss=sparse_loss,
        pg_collection=pg_collection,
        masks=masks,
        query_valid_rows=query_valid_rows,
        calculate_per_token_loss=calculate_per_token_loss,
        use_relu=use_relu,
        budget_bytes=plan.budget_bytes,
        non_compressed_lse=non_compressed_lse,
    )
    return topk_indices, indexer_loss(q, weights, k, query, key, topk_indices, spec)


def indexer_loss(
    q: torch.Tensor,
    weights: torch.Tensor,
    k: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    topk_indices: torch.Tensor,
    spec: LossSpec,
) -> torch.Tensor:
    """Upstream's indexer KL loss (``compute_dsa_indexer_loss`` on the indexer's scores) on
    exactly ``topk_indices`` [b, sq, K] (-1 marks an empty slot; no duplicates), with
    gradients for q, weights and k. Additive masks are validity masks (0 / -inf), as
    DSAttention builds them.
    """
    query, _ = dsa_layout.ensure_sbhd(query, "query")
    key, _ = dsa_layout.ensure_sbhd(key, "key")
    sq, b = query.size(0), query.size(1)
    spec = replace(
        spec,
        query_valid_rows=dsa_masking.normalize_query_valid_rows(
            spec.query_valid_rows, b=b, sq=sq, device=q.device
        ),
    )
    _check_outside_mass(spec.non_compressed_lse, (b, query.size(2), sq), q.device)
    rows = _agreed_rows(_loss_rows(q, query, key, topk_indices, spec), spec.pg_collection.tp, q)
    return BlockwiseIndexerLoss.apply(q, weights, k, query, key, topk_indices, spec, rows)


def _agreed_rows(rows: int, tp_group: Any, q: torch.Tensor) -> int:
    """The fewest rows per block of the tensor-parallel ranks: each block's target is
    all-reduced over them, so every rank must cut the same blocks, and each sized its own
    from its own free memory."""
    if tp_group.size() <= 1:
        return rows
    agreed = torch.tensor([rows], dtype=torch.int64, device=q.device)
    torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MIN, group=tp_group)
    return int(agreed.item())


def _check_outside_mass(outside: Optional[torch.Tensor], shape, device) -> None:
    """``non_compressed_lse`` as upstream's dev accepts it: [b, heads, sq], detached."""
    if outside is None:
        return
    if tuple(outside.shape) != shape:
        raise ValueError(
            "non_compressed_lse must have shape [batch, heads, seqlen_q], "
            f"got {tuple(outside.shape)}, expected {shape}"
        )
    if outside.device != device:
        raise ValueError(f"non_compressed_lse is on {outside.device}, the inputs on {device}")
    if outside.requires_grad:
        raise ValueError("non_compressed_lse must be detached")


# =====================================================================================
# The sparse indexer loss on upstream's fused TileLang kernels, over the selected indices
# =====================================================================================

# Query rows per target / KL chunk: upstream's streaming loss uses the same.
LOSS_CHUNK_ROWS = 512


@dataclass(frozen=True)
class FusedLossKernels:
    """Upstream's TileLang pieces the fused loss calls (ops.indexer / ops.tilelang_dsa)."""

    indexer_bwd: Callable
    sparse_target: Optional[Callable]  # (query [s, h, d], key [sk, d], idx [s, K], scale)
    can_use_sparse_target: Callable
    target_chunk_sum: Callable  # upstream's torch target over selected keys, head chunks
    sparse_kl: Optional[Callable]  # (target, logits, valid) -> (kl_sum, grad_logits)
    can_use_sparse_kl: Callable


def _fused_loss_kernels(plan: BlockwisePlan, q, k, query, key, masks: RowMasks, sparse: bool):
    """Upstream's fused loss kernels when this call can use them, else None (the torch
    block-wise loss runs): TileLang scoring, the sparse loss, bf16 indexer inputs, a head
    count the indexer backward supports, key bounds over identity positions (or no mask)."""
    if not (plan.use_tilelang and sparse and q.dtype == k.dtype == torch.bfloat16):
        return None
    if not masks.column_bounds or not q.is_cuda or _tilelang_scorer() is None:
        return None
    try:
        from megatron.core.transformer.experimental_attention_variant.ops import (
            indexer,
            tilelang_dsa,
            tilelang_indexer_bwd,
        )
    except (ImportError, OSError):
        return None
    needed = ("_can_use_fused_sparse_indexer_target", "_compute_topk_target_chunk_sum")
    if not indexer.HAVE_TILELANG_INDEXER or not all(hasattr(tilelang_dsa, n) for n in needed):
        return None
    if not tilelang_indexer_bwd.is_supported_indexer_bwd_head_count(q.size(2)):
        return None
    query, _ = dsa_layout.ensure_sbhd(query, "query")
    key, _ = dsa_layout.ensure_sbhd(key, "key")
    if query.size(1) != q.size(1) or key.size(1) != q.size(1) or key.size(-1) != query.size(-1):
        return None
    if key.size(2) not in (1, query.size(2)):
        return None
    sparse_kl = None
    if getattr(tilelang_dsa, "SparseIndexerKLLoss", None) is not None:
        from megatron.core.transformer.experimental_attention_variant.ops import (
            tilelang_indexer_loss,
        )

        sparse_kl = tilelang_indexer_loss.sparse_indexer_kl_interface
    return FusedLossKernels(
        indexer_bwd=indexer.indexer_bwd_interface,
        sparse_target=getattr(tilelang_dsa, "sparse_indexer_target_interface", None),
        can_use_sparse_target=tilelang_dsa._can_use_fused_sparse_indexer_target,
        target_chunk_sum=tilelang_dsa._compute_topk_target_chunk_sum,
        sparse_kl=sparse_kl,
        can_use_sparse_kl=getattr(tilelang_dsa, "_can_use_fused_sparse_indexer_kl", lambda *_: False),
    )


@dataclass(frozen=True)
class FusedLossSpec:
    softmax_scale: float
    topk: int
    loss_coeff: float
    pg_collection: Any
    masks: RowMasks
    query_valid_rows: Optional[torch.Tensor]
    calculate_per_token_loss: bool
    use_relu: bool
    plan: BlockwisePlan
    kernels: FusedLossKernels


def _kl_and_gradient(kernels: FusedLossKernels, target, logits, valid):
    """(sum of KL(target || softmax(logits)) over valid slots, its gradient in the logits):
    upstream's fused KL kernel where it applies, else the same in torch."""
    if kernels.sparse_kl is not None and kernels.can_use_sparse_kl(target, logits, valid):
        return kernels.sparse_kl(target.contiguous(), logits.contiguous(), valid.contiguous())
    target = dsa_indexer_loss.normalize_indexer_target(target.masked_fill(~valid, 0.0))
    log_probs = dsa_masking.masked_log_softmax(logits, valid, dim=-1)
    kl = dsa_indexer_loss.indexer_kl_sum(target, log_probs, valid)
    grad = (log_probs.exp() - target).masked_fill(~valid, 0.0)
    return kl, grad


class FusedSparseIndexerLoss(torch.autograd.Function):
    """Selection with the plan's backend on TileLang's scores, then the sparse indexer loss on
    upstream's fused kernels over exactly those indices; the backward runs TileLang's indexer
    backward on the same indices (it never selects). Returns (indices, loss)."""

    @staticmethod
    def forward(ctx, q, weights, k, query, key, spec: FusedLossSpec):
        kernels = spec.kernels
        query, _ = dsa_layout.ensure_sbhd(query, "query")
        key, _ = dsa_layout.ensure_sbhd(key, "key")
        sq, b = q.size(0), q.size(1)
        sk, dim = key.size(0), query.size(3)
        selection = _select_blocks(
            q, k, weights, spec.topk, spec.plan, spec.masks, spec.use_relu, keep_values=True
        )
        indices, logits = selection.indices, selection.values
        rows_valid = dsa_masking.normalize_query_valid_rows(
            spec.query_valid_rows, b=b, sq=sq, device=q.device
        )
        grad_logits = torch.zeros_like(logits)
        kl_sum = torch.zeros((), dtype=torch.float32, device=q.device)
        tp_group = spec.pg_collection.tp
        tp_reduce = tp_group.size() > 1
        for bi in range(b):
            shared = key.size(2) == 1 or key.stride(2) == 0  # one key head (absorbed MLA)
            key_shared = key[:, bi, 0].contiguous() if shared else None
            key_per_head = None if shared else key[:, bi].permute(1, 0, 2).contiguous()
            query_h = None
            for start in range(0, sq, LOSS_CHUNK_ROWS):
                end = min(start + LOSS_CHUNK_ROWS, sq)
                idx = indices[bi, start:end]
                valid = idx >= 0
                if rows_valid is not None:
                    valid &= rows_valid[bi, start:end].unsqueeze(-1)
                query_chunk = query[start:end, bi].contiguous()
                loss_idx = idx.masked_fill(~valid, -1).contiguous()
                if kernels.sparse_target is not None and kernels.can_use_sparse_target(
                    query_chunk, key_shared, loss_idx
                ):
                    target = kernels.sparse_target(
                        query_chunk, key_shared, loss_idx, spec.softmax_scale
                    )
                else:
                    if query_h is None:
                        query_h = query[:, bi].permute(1, 0, 2).contiguous()
                    target = kernels.target_chunk_sum(
                        query_h=query_h,
                        key_shared=key_shared,
                        key_per_head=key_per_head,
                        s0=start,
                        s1=end,
                        idx_seq=idx.clamp(min=0).to(torch.int64),
                        valid_seq=valid,
                        softmax_scale=spec.softmax_scale,
                        head_chunk_size=16,
                        topk_chunk_size=1024,
                        sk=sk,
                        hn=dim,
                    ).clone()
                if tp_reduce:  # attention heads are split over TP ranks
                    torch.distributed.all_reduce(target, group=tp_group)
                kl, grad = _kl_and_gradient(kernels, target.float(), logits[bi, start:end], valid)
                kl_sum += kl
                grad_logits[bi, start:end] = grad
        loss_spec = LossSpec(
            softmax_scale=spec.softmax_scale,
            loss_coeff=spec.loss_coeff,
            sparse_loss=True,
            pg_collection=spec.pg_collection,
            query_valid_rows=rows_valid,
            calculate_per_token_loss=spec.calculate_per_token_loss,
        )
        scale = _loss_scale(loss_spec, sq, b, q.device)
        ctx.save_for_backward(q, weights, k, indices, grad_logits, scale)
        ctx.blocks, ctx.use_relu, ctx.kernels = selection.blocks, spec.use_relu, kernels
        ctx.mark_non_differentiable(indices)
        return indices, kl_sum * scale

    @staticmethod
    def backward(ctx, _grad_indices, grad_loss):
        q, weights, k, indices, grad_logits, scale = ctx.saved_tensors
        # The blocks cover every row; with none (no key to select) every gradient is zero.
        new = torch.empty_like if ctx.blocks else torch.zeros_like
        grad_q = new(q)
        grad_weights = new(weights, dtype=torch.float32)
        grad_k = torch.zeros_like(k, dtype=torch.float32)
        factor = grad_loss * scale
        for bi in range(q.size(1)):
            k_b = k[:, bi].contiguous()
            for start, end in ctx.blocks:
                gq, gw, gk = ctx.kernels.indexer_bwd(
                    q[start:end, bi].contiguous(),
                    weights[start:end, bi],
                    k_b,
                    indices[bi, start:end].contiguous(),
                    grad_logits[bi, start:end] * factor,
                    use_relu=ctx.use_relu,
                )
                grad_q[start:end, bi] = gq
                grad_weights[start:end, bi] = gw
                grad_k[:, bi] += gk.float()
        return grad_q, grad_weights.to(weights.dtype), grad_k.to(k.dtype), None, None, None


# =====================================================================================
# Hooks for the v1 DSA of megatron-core 0.16-0.18
# =====================================================================================


@dataclass(frozen=True)
class IndexerInputs:
    """What the indexer scored with, handed on where 0.16's DSAIndexer.forward_with_scores
    returns its dense scores: with a backend the scores are never materialised, and the
    block-wise loss (``preselected_loss_function``) scores again from these, block by block.
    """

    q: torch.Tensor
    k: torch.Tensor
    weights: torch.Tensor
    mask: Optional[torch.Tensor] = None


def preselected_loss_function(plan: BlockwisePlan) -> Callable[..., torch.Tensor]:
    """A drop-in for ``compute_dsa_indexer_loss`` where 0.16's DSAttention calls it with the
    indexer's scores: given ``IndexerInputs`` instead, the loss runs in blocks of rows on
    exactly the indices the plan's backend selected."""
    return functools.partial(preselected_indexer_loss, plan=plan)


def preselected_indexer_loss(
    index_scores: IndexerInputs,
    topk_indices: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    softmax_scale: float,
    loss_coeff: float,
    sparse_loss: bool,
    pg_collection: Any,
    mask: Optional[torch.Tensor] = None,
    varlen_starts: Optional[torch.Tensor] = None,
    varlen_ends: Optional[torch.Tensor] = None,
    key_positions: Optional[torch.Tensor] = None,
    query_valid_rows: Optional[torch.Tensor] = None,
    calculate_per_token_loss: bool = False,
    non_compressed_lse: Optional[torch.Tensor] = None,
    *,
    plan: BlockwisePlan,
) -> torch.Tensor:
    """``compute_dsa_indexer_loss``'s inputs (every generation's, in upstream's order) and
    result; the mask defaults to the one the indexer selected under."""
    inputs = index_scores
    spec = LossSpec(
        softmax_scale=softmax_scale,
        loss_coeff=loss_coeff,
        sparse_loss=sparse_loss,
        pg_collection=pg_collection,
        masks=RowMasks.normalized(
            inputs.mask if mask is None else mask,
            varlen_starts,
            varlen_ends,
            key_positions,
            sk=inputs.k.size(0),
            device=inputs.q.device,
        ),
        query_valid_rows=query_valid_rows,
        calculate_per_token_loss=calculate_per_token_loss,
        budget_bytes=plan.budget_bytes,
        non_compressed_lse=non_compressed_lse,
    )
    return indexer_loss(inputs.q, inputs.weights, inputs.k, query, key, topk_indices, spec)


def scatter_ready(topk_indices: torch.Tensor) -> torch.Tensor:
    """Indices as v1's ``unfused_dsa_fn`` scatters them: int64, no -1 slot.

    The explicit backends give int32 with -1 in empty slots (0.19's sparse attention takes
    that as it is). Here an empty slot repeats its row's first index, so the set of keys is
    unchanged; a row with no key at all gets key 0, which v1's causal mask always shows.
    Upstream's own int64 indices come back untouched, the very same tensor.
    """
    if topk_indices.dtype == torch.int64:
        return topk_indices
    first = topk_indices[..., :1].clamp_min(0)
    return torch.where(topk_indices < 0, first, topk_indices).long()
