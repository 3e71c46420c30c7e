# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Every upstream interface the overlay stands in for, or calls, checked against the real
signatures of the base it is applied to. Upstream changes these between generations
(0.17-0.18, 0.19, NVIDIA dev): a mismatch must fail here, by name, not deep in a run."""

import importlib
import inspect

import pytest

from megatron.core.transformer.experimental_attention_variant import dsa, dsa_blockwise


def positional(function):
    return [
        p
        for p in inspect.signature(function).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def upstream_indexer_loss_inputs():
    """FusedDSAIndexerLoss.apply's inputs, in order, as the base names them."""
    forward = [p.name for p in positional(dsa.FusedDSAIndexerLoss.forward)][1:]  # after ctx
    named = getattr(dsa, "_FUSED_DSA_INDEXER_LOSS_INPUT_NAMES", None)  # 0.19+: backward's map
    if named is not None:
        assert list(named) == forward, "upstream's input names and forward() disagree"
    return forward


def test_loss_stand_in_takes_the_base_indexer_loss_inputs_in_order():
    """The DSAttention hook swaps FusedDSAIndexerLoss.apply for the block-wise loss,
    positionally: every input the base passes lands on the parameter of the same name, and
    inputs of newer generations have defaults."""
    if not hasattr(dsa, "FusedDSAIndexerLoss"):
        pytest.skip("this base computes the indexer loss without FusedDSAIndexerLoss")
    names = upstream_indexer_loss_inputs()
    params = positional(dsa_blockwise.indexer_topk_and_loss)
    assert [p.name for p in params[: len(names)]] == names
    assert all(p.default is not p.empty for p in params[len(names) :])
    plan = inspect.signature(dsa_blockwise.indexer_topk_and_loss).parameters["plan"]
    assert plan.kind is plan.KEYWORD_ONLY


def test_naive_topk_hook_passes_what_the_base_naive_topk_takes():
    """fused_qk_topk_naive hands its own masks on to dsa_blockwise.select_topk by name."""
    naive = getattr(dsa, "fused_qk_topk_naive", None)
    if naive is None:
        pytest.skip("this base selects inside DSAIndexer (no fused_qk_topk_naive)")
    names = [p.name for p in positional(naive) if p.name != "topk_policy"]
    assert names[:4] == ["q", "k", "weights", "index_topk"]
    assert "topk_policy" in inspect.signature(naive).parameters
    ours = inspect.signature(dsa_blockwise.select_topk).parameters
    assert set(names) <= set(ours), set(names) - set(ours)


def test_index_scorer_takes_what_the_overlay_passes():
    scorer = dsa._compute_index_scores
    inspect.signature(scorer).bind("q", "weights", "k", use_relu=True)


@pytest.mark.parametrize(
    "module, function, args, kwargs",
    [
        (
            "dsa_masking",
            "normalize_varlen_bounds",
            (),
            dict(mask=0, varlen_starts=0, varlen_ends=0, key_positions=0, sk=0, device=0),
        ),
        ("dsa_masking", "apply_starts_ends_mask_to_scores", ("s", "st", "e", "kp"), {}),
        ("dsa_masking", "build_valid_mask_from_starts_ends", ("st", "e", "kp"), {}),
        ("dsa_masking", "masked_softmax", ("x", "valid"), dict(dim=-1)),
        ("dsa_masking", "masked_log_softmax", ("x", "valid"), dict(dim=-1)),
        ("dsa_masking", "normalize_query_valid_rows", ("rows",), dict(b=1, sq=1, device=0)),
        ("dsa_indexer_loss", "normalize_indexer_target", ("target",), {}),
        ("dsa_indexer_loss", "indexer_kl_per_row", ("target", "log_probs"), {}),
        ("dsa_layout", "ensure_sbhd", ("x", "name"), {}),
    ],
)
def test_upstream_helpers_take_what_the_overlay_passes(module, function, args, kwargs):
    helpers = importlib.import_module(f"{dsa.__package__}.{module}")
    inspect.signature(getattr(helpers, function)).bind(*args, **kwargs)


def test_fused_indexer_scorer_takes_what_the_overlay_passes():
    try:
        from megatron.core.transformer.experimental_attention_variant.ops import indexer
    except (ImportError, OSError):
        pytest.skip("this base ships no TileLang indexer (ops.indexer)")
    assert isinstance(indexer.HAVE_TILELANG_INDEXER_FWD, bool)
    inspect.signature(indexer.indexer_fwd_interface).bind(
        "q", "k", "weights", "starts", "ends", clean_logits=True, use_relu=True
    )
