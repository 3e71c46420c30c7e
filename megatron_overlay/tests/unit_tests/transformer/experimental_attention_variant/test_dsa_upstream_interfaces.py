# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Every upstream interface the overlay stands in for, or calls, checked against the real
signatures of the base it is applied to. Upstream changes these between generations
(0.17-0.18, 0.19, NVIDIA dev): a mismatch must fail here, by name, not deep in a run."""

import inspect

import pytest
import torch

from megatron.core.transformer.experimental_attention_variant import (
    dsa,
    dsa_blockwise,
    dsa_upstream,
)


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


def test_preselected_loss_stand_in_takes_the_base_loss_inputs_in_order():
    """On 0.16 the DSAttention hook swaps compute_dsa_indexer_loss for the block-wise loss,
    positionally (the indexer's inputs where the scores go)."""
    names = [p.name for p in positional(dsa.compute_dsa_indexer_loss)]
    params = positional(dsa_blockwise.preselected_indexer_loss)
    assert [p.name for p in params[: len(names)]] == names
    assert all(p.default is not p.empty for p in params[len(names) :])


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


def test_index_scores_are_the_base_scorer_output():
    """dsa_upstream.index_scores reaches the base's scorer, whatever shape it has (0.16: a
    DSAIndexer method; 0.17-0.18: no use_relu; 0.19+: use_relu) and gives its scores."""
    generator = torch.Generator().manual_seed(0)
    q, weights, k = (torch.randn(*shape, generator=generator) for shape in QWK_SHAPES)
    products = torch.einsum("sbhd,tbd->sbht", q, k)
    scorer = getattr(dsa, "_compute_index_scores", None)
    takes_relu = scorer is not None and "use_relu" in inspect.signature(scorer).parameters
    for relu in (True, False):
        expected = ((products.relu() if relu else products) * weights[..., None]).sum(2)
        if not relu and not takes_relu:  # v1 DSA always applies it
            with pytest.raises(ValueError, match="always scores with a ReLU"):
                dsa_upstream.index_scores(q, weights, k, use_relu=False)
            continue
        torch.testing.assert_close(
            dsa_upstream.index_scores(q, weights, k, use_relu=relu), expected.transpose(0, 1)
        )


QWK_SHAPES = ((5, 2, 3, 4), (5, 2, 3), (6, 2, 4))  # q [sq, b, h, d], weights, k [sk, b, d]
# How dsa_blockwise calls each helper (argument names and keywords).
HELPER_CALLS = {
    "normalize_varlen_bounds": (
        (),
        dict(mask=0, varlen_starts=0, varlen_ends=0, key_positions=0, sk=0, device=0),
    ),
    "apply_starts_ends_mask_to_scores": (("scores", "starts", "ends", "key_positions"), {}),
    "build_valid_mask_from_starts_ends": (("starts", "ends", "key_positions"), {}),
    "masked_softmax": (("logits", "valid"), dict(dim=-1)),
    "masked_log_softmax": (("logits", "valid"), dict(dim=-1)),
    "normalize_query_valid_rows": (("rows",), dict(b=1, sq=1, device=0)),
    "normalize_indexer_target": (("target",), {}),
    "indexer_kl_per_row": (("target", "log_probs"), {}),
    "indexer_kl_sum": (("target", "log_probs", "valid"), {}),
    "ensure_sbhd": (("tensor", "name"), {}),
}
HELPERS = [(module, name) for module, names in dsa_upstream.DEFINITIONS.items() for name in names]


@pytest.mark.parametrize("module, name", HELPERS)
def test_helpers_in_use_take_what_the_overlay_passes(module, name):
    """The helper dsa_blockwise calls (upstream's where the base has it) binds its call."""
    args, kwargs = HELPER_CALLS[name]
    helper = getattr(getattr(dsa_upstream, module), name)
    inspect.signature(helper).bind(*args, **kwargs)
    upstream = dsa_upstream.upstream_module(module)
    if hasattr(upstream, name):
        assert helper is getattr(upstream, name)


def helper_examples(name):
    """Inputs that reach each helper's corners: fully masked rows, -inf, packed layouts."""
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 5, generator=generator)
    valid = torch.rand(2, 3, 5, generator=generator) > 0.4
    valid[0, 1] = False  # a row with nothing valid
    starts, ends = torch.tensor([0, 1, 1, 3]), torch.tensor([1, 3, 4, 5])
    positions = torch.tensor([0, 2, 1, 3, 4])
    return {
        "normalize_varlen_bounds": [
            dict(mask=None, varlen_starts=None, varlen_ends=None, key_positions=None),
            dict(mask=None, varlen_starts=starts, varlen_ends=ends, key_positions=None),
            dict(mask=None, varlen_starts=starts, varlen_ends=ends, key_positions=positions),
        ],
        "build_valid_mask_from_starts_ends": [(starts, ends, positions)],
        "apply_starts_ends_mask_to_scores": [
            (torch.randn(2, 4, 5, generator=generator), starts, ends, positions),
            (torch.randn(2, 3, 4, 5, generator=generator), starts, ends, positions),
        ],
        "masked_softmax": [(logits, valid)],
        "masked_log_softmax": [(logits, valid)],
        "normalize_query_valid_rows": [
            (None,),
            (torch.tensor([1, 0, 1]),),
            (torch.tensor([[True, False, True]]),),
            (valid[:, :, 0],),
        ],
        "normalize_indexer_target": [(torch.rand(2, 3, 5, generator=generator),)],
        "indexer_kl_per_row": [
            (torch.softmax(logits, -1), torch.log_softmax(logits, -1)),
            (torch.softmax(logits, -1), torch.log_softmax(logits, -1), valid),
        ],
        "indexer_kl_sum": [
            (torch.softmax(logits, -1), torch.log_softmax(logits, -1)),
            (torch.softmax(logits, -1), torch.log_softmax(logits, -1), valid),
        ],
        "ensure_sbhd": [(torch.zeros(4, 2, 3, 5), "x"), (torch.zeros(4, 3, 5), "x")],
    }[name]


@pytest.mark.parametrize("module, name", HELPERS)
def test_definitions_for_v1_equal_upstream_helpers(module, name):
    """On v1 DSA the overlay uses its own definitions; where the base has upstream's helper
    (0.19+), the two agree exactly, corners included."""
    upstream = getattr(dsa_upstream.upstream_module(module), name, None)
    if upstream is None:
        pytest.skip(f"this base has no {module}.{name} (v1 DSA: the overlay's is in use)")
    own = dsa_upstream.DEFINITIONS[module][name]
    for example in helper_examples(name):
        args, kwargs = (example, {}) if isinstance(example, tuple) else ((), example)
        if name == "normalize_varlen_bounds":
            kwargs = dict(kwargs, sk=5, device=torch.device("cpu"))
        if name == "normalize_query_valid_rows":
            kwargs = dict(b=2, sq=3, device=torch.device("cpu"))
        if name in ("masked_softmax", "masked_log_softmax"):
            kwargs = dict(dim=-1)
        theirs, ours = upstream(*args, **kwargs), own(*args, **kwargs)
        for mine, upstreams in zip(_flat(ours), _flat(theirs)):
            assert type(mine) is type(upstreams)
            if isinstance(upstreams, torch.Tensor):
                assert mine.dtype == upstreams.dtype and torch.equal(mine, upstreams)
            else:
                assert mine == upstreams


def _flat(value):
    return list(value) if isinstance(value, tuple) else [value]


def test_fused_indexer_scorer_takes_what_the_overlay_passes():
    try:
        from megatron.core.transformer.experimental_attention_variant.ops import indexer
    except (ImportError, OSError):
        pytest.skip("this base ships no TileLang indexer (ops.indexer)")
    assert isinstance(indexer.HAVE_TILELANG_INDEXER_FWD, bool)
    inspect.signature(indexer.indexer_fwd_interface).bind(
        "q", "k", "weights", "starts", "ends", clean_logits=True, use_relu=True
    )


def test_fused_loss_kernels_take_what_the_overlay_passes():
    """The fused TileLang loss calls upstream's ops (0.19 ships them; dev and v1 do not)."""
    try:
        from megatron.core.transformer.experimental_attention_variant.ops import (
            indexer,
            tilelang_dsa,
            tilelang_indexer_bwd,
        )
    except ModuleNotFoundError as missing:
        if not missing.name.startswith(f"{dsa.__package__}.ops"):
            raise
        pytest.skip("this base ships no TileLang DSA ops (its fused loss path never runs)")
    inspect.signature(tilelang_indexer_bwd.is_supported_indexer_bwd_head_count).bind(64)
    inspect.signature(indexer.indexer_bwd_interface).bind(
        "q", "weights", "k", "indices", "grad_scores", use_relu=True
    )
    inspect.signature(tilelang_dsa._compute_topk_target_chunk_sum).bind(
        query_h=0,
        key_shared=0,
        key_per_head=0,
        s0=0,
        s1=1,
        idx_seq=0,
        valid_seq=0,
        softmax_scale=1.0,
        head_chunk_size=16,
        topk_chunk_size=1024,
        sk=1,
        hn=1,
    )
    inspect.signature(tilelang_dsa._can_use_fused_sparse_indexer_target).bind("q", "k", "idx")
    target = getattr(tilelang_dsa, "sparse_indexer_target_interface", None)
    if target is not None:
        inspect.signature(target).bind("query", "key", "indices", 1.0)
