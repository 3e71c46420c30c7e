# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""The upstream DSA helpers the overlay builds on, on every upstream generation.

megatron-core 0.19 moved DSA's masking, layout and indexer-loss helpers into their own
modules (``dsa_masking``, ``dsa_layout``, ``dsa_indexer_loss``); the v1 DSA of 0.16-0.18
(and forks built on it) has none of them, and 0.16 scores the indexer in a ``DSAIndexer``
method rather than a module function. Each helper here is upstream's own where the base
has it, else the same definition for bases that do not. What the base offers is read from
its code, never from a version number: a fork's branch is whatever its code is.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType, SimpleNamespace
from typing import Optional, Tuple

import torch


def _ensure_sbhd(tensor: torch.Tensor, name: str) -> Tuple[torch.Tensor, bool]:
    """[s, b, h, d] as is; packed [t, h, d] as [t, 1, h, d] (True: it was packed)."""
    if tensor.ndim == 4:
        return tensor, False
    if tensor.ndim == 3:
        return tensor.unsqueeze(1), True
    raise ValueError(f"{name} must be 3D ([t,h,d]) or 4D ([s,b,h,d]), got {tensor.ndim}D")


def _normalize_varlen_bounds(
    *, mask, varlen_starts, varlen_ends, key_positions, sk: int, device
) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Row-wise key bounds [starts, ends) over key positions as int64, or three Nones."""
    if mask is not None and varlen_starts is not None:
        raise ValueError("mask and varlen_starts are mutually exclusive")
    if varlen_starts is None:
        return None, None, None
    if varlen_ends is None:
        raise ValueError("varlen_ends is required when varlen_starts is provided")
    if key_positions is None:
        key_positions = torch.arange(sk, device=device)
    bounds = (varlen_starts, varlen_ends, key_positions)
    return tuple(t.to(device=device, dtype=torch.int64) for t in bounds)


def _valid_from_bounds(starts, ends, key_positions) -> torch.Tensor:
    """[sq, sk] bool: the key's position lies in the row's [start, end)."""
    positions = key_positions.to(torch.int64).unsqueeze(0)
    return (positions >= starts.to(torch.int64).unsqueeze(-1)) & (
        positions < ends.to(torch.int64).unsqueeze(-1)
    )


def _mask_scores_to_bounds(scores, starts, ends, key_positions) -> torch.Tensor:
    """Scores [b, sq, sk] or [b, heads, sq, sk] with keys outside the row's bounds at -inf."""
    valid = _valid_from_bounds(starts, ends, key_positions)
    return scores.masked_fill(~valid.view((1,) * (scores.ndim - 2) + valid.shape), float("-inf"))


def _masked_softmax(logits, valid_mask, *, dim: int = -1, eps: float = 1e-10) -> torch.Tensor:
    """Softmax over the valid entries; invalid entries (and rows with none) are 0."""
    masked = logits.masked_fill(~valid_mask, torch.finfo(logits.dtype).min)
    row_max = masked.max(dim=dim, keepdim=True).values
    row_max = torch.where(valid_mask.any(dim=dim, keepdim=True), row_max, 0.0)
    probs = torch.exp(masked - row_max).masked_fill(~valid_mask, 0.0)
    return (probs / probs.sum(dim=dim, keepdim=True).clamp_min(eps)).masked_fill(~valid_mask, 0.0)


def _masked_log_softmax(logits, valid_mask, *, dim: int = -1) -> torch.Tensor:
    """Log-softmax over the valid entries; invalid entries are 0."""
    masked = logits.masked_fill(~valid_mask, torch.finfo(logits.dtype).min)
    safe = torch.where(valid_mask.any(dim=dim, keepdim=True), masked, 0.0)
    return torch.log_softmax(safe, dim=dim).masked_fill(~valid_mask, 0.0)


def _normalize_query_valid_rows(rows, *, b: int, sq: int, device) -> Optional[torch.Tensor]:
    """Query-row validity ([sq], [1, sq] or [b, sq]) as [b, sq] bool."""
    if rows is None:
        return None
    rows = rows.to(device=device, dtype=torch.bool)
    if tuple(rows.shape) in ((sq,), (1, sq), (b, sq)):
        return rows.expand(b, sq)
    raise ValueError(f"query_valid_rows must be [{sq}] or [{b}, {sq}], got {tuple(rows.shape)}")


_INDEXER_LOSS_EPS = 1e-10


def _normalize_indexer_target(target: torch.Tensor) -> torch.Tensor:
    return target / target.sum(dim=-1, keepdim=True).clamp_min(_INDEXER_LOSS_EPS)


def _indexer_kl_terms(target, predict_log_probs, valid_mask=None) -> torch.Tensor:
    """KL(target || predict) term by term; 0 outside the valid mask."""
    terms = target * (torch.log(target.clamp_min(_INDEXER_LOSS_EPS)) - predict_log_probs)
    return terms if valid_mask is None else terms.masked_fill(~valid_mask, 0.0)


def _indexer_kl_per_row(target, predict_log_probs, valid_mask=None) -> torch.Tensor:
    return _indexer_kl_terms(target, predict_log_probs, valid_mask).sum(dim=-1)


def _indexer_kl_sum(target, predict_log_probs, valid_mask=None) -> torch.Tensor:
    return _indexer_kl_terms(target, predict_log_probs, valid_mask).sum()


# The helpers the overlay uses, by upstream module, with the definition for bases without.
DEFINITIONS = {
    "dsa_masking": dict(
        normalize_varlen_bounds=_normalize_varlen_bounds,
        build_valid_mask_from_starts_ends=_valid_from_bounds,
        apply_starts_ends_mask_to_scores=_mask_scores_to_bounds,
        masked_softmax=_masked_softmax,
        masked_log_softmax=_masked_log_softmax,
        normalize_query_valid_rows=_normalize_query_valid_rows,
    ),
    "dsa_indexer_loss": dict(
        normalize_indexer_target=_normalize_indexer_target,
        indexer_kl_per_row=_indexer_kl_per_row,
        indexer_kl_sum=_indexer_kl_sum,
    ),
    "dsa_layout": dict(ensure_sbhd=_ensure_sbhd),
}


def upstream_module(module: str) -> Optional[ModuleType]:
    """The base's ``experimental_attention_variant.<module>``, or None where it has none."""
    try:
        return importlib.import_module(f"{__package__}.{module}")
    except ModuleNotFoundError as missing:
        if missing.name != f"{__package__}.{module}":
            raise  # the module exists but cannot import: that is upstream's error to show
        return None


def _helpers(module: str) -> SimpleNamespace:
    """Upstream's functions where the base has them, the definitions above elsewhere."""
    upstream = upstream_module(module)
    own = DEFINITIONS[module]
    return SimpleNamespace(**{name: getattr(upstream, name, own[name]) for name in own})


dsa_masking = _helpers("dsa_masking")
dsa_indexer_loss = _helpers("dsa_indexer_loss")
dsa_layout = _helpers("dsa_layout")


def index_scores(
    q: torch.Tensor, weights: torch.Tensor, k: torch.Tensor, use_relu: bool = True
) -> torch.Tensor:
    """Upstream's indexer scores [b, sq, sk] float32 (its ``_compute_index_scores``).

    0.19 takes ``use_relu``; 0.17-0.18 always apply the ReLU; 0.16 has the scorer as a
    ``DSAIndexer`` method that does not use ``self``.
    """
    from megatron.core.transformer.experimental_attention_variant import dsa  # imports us

    scorer = getattr(dsa, "_compute_index_scores", None)
    if scorer is None:
        scorer = lambda *args: dsa.DSAIndexer._compute_index_scores(None, *args)  # noqa: E731
    elif "use_relu" in inspect.signature(scorer).parameters:
        return scorer(q, weights, k, use_relu=use_relu)
    if not use_relu:
        raise ValueError("this base's DSA indexer always scores with a ReLU (no use_relu)")
    return scorer(q, weights, k)
