# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Every top-k site of DSAttention honours the explicit backend, and the default (no backend)
is upstream's behaviour bit for bit."""

import logging

import pytest
import torch

from megatron.core.transformer.experimental_attention_variant import dsa, dsa_blockwise, dsa_topk

TOPK = 8


def tie_heavy_indexer(seq_len, batch, heads=3, dim=4, seed=0):
    """Indexer outputs whose ReLU-sum scores are small integers: plateaus of exact ties."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randint(-1, 2, (seq_len, batch, heads, dim), generator=generator).float()
    k = torch.randint(-1, 2, (seq_len, batch, dim), generator=generator).float()
    weights = torch.ones(seq_len, batch, heads)
    return q, k, weights


def causal_scores(q, k, weights):
    """Index scores as the indexer defines them, with the causal mask applied."""
    scores = (torch.einsum("sbhd,tbd->sbht", q, k).relu() * weights.unsqueeze(-1)).sum(2)
    scores = scores.transpose(0, 1)
    seq_len = scores.size(-1)
    future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf"))


def use_indexer(attention, monkeypatch, q, k, weights):
    monkeypatch.setattr(attention.indexer, "forward_before_topk", lambda *_: (q, k, weights))


def no_loss_tracker(monkeypatch, module=dsa):
    """The loss tracker allocates on CUDA; record the losses instead."""
    losses = []
    monkeypatch.setattr(
        module.DSAIndexerLossLoggingHelper,
        "save_loss_to_tracker",
        staticmethod(lambda loss, **_: losses.append(loss.detach().clone())),
    )
    return losses


@pytest.mark.parametrize("tie_break", [1, 2])
def test_explicit_backend_selects_exactly_the_policy_keys(
    make_config,
    build_attention,
    attention_inputs,
    captured_topk,
    monkeypatch,
    reference_topk,
    tie_break,
):
    config = make_config(
        dsa_indexer_topk=TOPK,
        dsa_indexer_topk_backend="torch",
        dsa_indexer_topk_tie_break=tie_break,
    )
    attention = build_attention(config).eval()
    q, k, weights = tie_heavy_indexer(12, 2)
    use_indexer(attention, monkeypatch, q, k, weights)
    with torch.no_grad():
        attention(**attention_inputs(config))
    (indices,) = captured_topk
    assert indices.dtype == torch.int32
    expected = reference_topk(causal_scores(q, k, weights), TOPK, tie_break)
    torch.testing.assert_close(indices, expected, rtol=0, atol=0)
    # Early rows see fewer than k keys: they are padded with -1.
    assert (indices[:, 0, 1:] == -1).all()


def test_no_keys_give_an_empty_selection_like_upstream(upstream_dsa):
    """fused_qk_topk_naive with sk == 0: upstream returns an empty [b, sq, 0]; so must we."""
    q, _, weights = tie_heavy_indexer(5, 2)
    keys = torch.zeros(0, 2, q.size(-1))
    _, ours = dsa.fused_qk_topk_naive(
        q,
        keys,
        weights,
        TOPK,
        topk_policy=dsa_blockwise.BlockwisePlan(dsa_topk.TopkPolicy("torch", tie_break=1)),
    )
    _, theirs = upstream_dsa.fused_qk_topk_naive(q, keys, weights, TOPK)
    assert ours.shape == theirs.shape == (2, 5, 0)


def test_indexer_forward_uses_the_configured_backend(
    make_config, build_attention, monkeypatch, reference_topk
):
    config = make_config(
        dsa_indexer_topk=TOPK, dsa_indexer_topk_backend="torch", dsa_indexer_topk_tie_break=2
    )
    indexer = build_attention(config).indexer
    q, k, weights = tie_heavy_indexer(10, 1, seed=4)
    monkeypatch.setattr(indexer, "forward_before_topk", lambda *_: (q, k, weights))
    mask = torch.full((10, 10), float("-inf")).triu(1)
    scores, indices = indexer.forward_with_scores(
        torch.zeros(10, 1, 64), torch.zeros(10, 1, 32), mask
    )
    assert scores is None  # scored and selected block by block, never materialised
    expected = reference_topk(causal_scores(q, k, weights), TOPK, 2)
    torch.testing.assert_close(indices, expected, rtol=0, atol=0)


def test_default_backend_matches_unpatched_upstream_bit_for_bit(
    make_config, build_attention, attention_inputs, upstream_dsa, monkeypatch
):
    config = make_config()
    patched = build_attention(config).eval()
    upstream = build_attention(config, module=upstream_dsa).eval()
    upstream.load_state_dict(patched.state_dict())
    inputs = attention_inputs(config)
    with torch.no_grad():
        assert torch.equal(patched(**inputs), upstream(**inputs))

    q, k, weights = tie_heavy_indexer(12, 2, seed=9)
    mask = torch.full((12, 12), float("-inf")).triu(1)
    ours = dsa.fused_qk_topk_naive(q, k, weights, TOPK, mask)
    theirs = upstream_dsa.fused_qk_topk_naive(q, k, weights, TOPK, mask)
    assert ours[1].dtype == theirs[1].dtype == torch.int64  # upstream's dtype on this path
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_default_backend_loss_and_gradients_match_upstream(
    make_config, build_attention, attention_inputs, upstream_dsa, monkeypatch
):
    config = make_config(dsa_indexer_loss_coeff=0.5, dsa_indexer_use_sparse_loss=True)
    patched = build_attention(config).train()
    upstream = build_attention(config, module=upstream_dsa).train()
    upstream.load_state_dict(patched.state_dict())
    patched_losses = no_loss_tracker(monkeypatch)
    upstream_losses = no_loss_tracker(monkeypatch, upstream_dsa)
    outputs = []
    for module in (patched, upstream):
        out = module(**attention_inputs(config, requires_grad=True))
        out.square().sum().backward()
        outputs.append(out.detach())
    assert torch.equal(outputs[0], outputs[1])
    assert torch.equal(patched_losses[0], upstream_losses[0])
    for (name, ours), theirs in zip(patched.named_parameters(), upstream.parameters()):
        assert ours.grad is not None and torch.equal(ours.grad, theirs.grad), name


def test_fused_topk_kernels_never_run_with_a_backend(
    make_config, build_attention, attention_inputs, fused_kernels_that_raise, monkeypatch, caplog
):
    config = make_config(
        dsa_indexer_topk_backend="torch",
        dsa_indexer_topk_tie_break=1,
        dsa_indexer_loss_coeff=1.0,
        dsa_indexer_use_sparse_loss=True,
    )
    attention = build_attention(config, layer_number=2)
    losses = no_loss_tracker(monkeypatch)
    monkeypatch.setattr(dsa_blockwise, "_logged_paths", set())
    with caplog.at_level(logging.INFO, logger=dsa_blockwise.__name__):
        with torch.no_grad():
            attention.eval()(**attention_inputs(config))  # plain top-k path
        attention.train()
        for seed in (1, 2):  # indexer-loss path, twice
            attention(**attention_inputs(config, seed=seed)).sum().backward()
    assert len(losses) == 2
    # The layer says once which scorer and selector it uses.
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("DSA indexer layer 2: scores by torch") and "torch backend" in line


def test_without_a_backend_the_fused_kernels_do_run(
    make_config, build_attention, attention_inputs, fused_kernels_that_raise
):
    """Control for the test above: the raising kernels are reachable when no backend is set."""
    config = make_config()
    with pytest.raises(AssertionError, match="internal fused top-k kernel .* must not run"):
        with torch.no_grad():
            build_attention(config).eval()(**attention_inputs(config))


def test_index_sharing_layers_get_the_same_indices(
    make_config, build_attention, attention_inputs, captured_topk, monkeypatch
):
    config = make_config(
        dsa_indexer_topk_freq=2, dsa_indexer_topk_backend="torch", dsa_indexer_topk_tie_break=2
    )
    computing = build_attention(config, layer_number=1).eval()
    sharing = build_attention(config, layer_number=2).eval()
    assert sharing.skip_topk and sharing.indexer is None and sharing.source_layer == 1
    use_indexer(computing, monkeypatch, *tie_heavy_indexer(12, 2, seed=3))
    inputs = attention_inputs(config)
    with torch.no_grad():
        computing(**inputs)
        sharing(**inputs)
    first, second = captured_topk
    assert first.dtype == second.dtype == torch.int32
    assert torch.equal(first, second)


@pytest.mark.parametrize("tie_break", [1, 2])
def test_sequence_local_tp_rows_use_the_backend(
    tie_break,
    make_config,
    build_attention,
    monkeypatch,
    attention_inputs,
    captured_topk,
    reference_topk,
):
    """TP rank 1 of 2 with sequence parallelism: the indexer sees all rows, attention its own,
    selected by the backend's tie policy on tie-heavy scores."""
    seq_len, tp_size = 6, 2
    full = seq_len * tp_size
    q, k, weights = tie_heavy_indexer(full, 1, seed=5)
    config = make_config(dsa_indexer_topk_backend="torch", dsa_indexer_topk_tie_break=tie_break)
    attention = build_attention(config).eval()
    tp_group = type(attention.pg_collection.cp)(tp_size, 1)
    monkeypatch.setattr(config, "sequence_parallel", True)
    monkeypatch.setattr(attention.pg_collection, "tp", tp_group)
    # Without torch.distributed, get_pg_size() says 1 whatever the group.
    monkeypatch.setattr(dsa, "get_pg_size", lambda group=None: group.size() if group else 1)
    use_indexer(attention, monkeypatch, q, k, weights)
    monkeypatch.setattr(
        dsa,
        "gather_from_sequence_parallel_region",
        lambda tensor, group: torch.cat([tensor] * tp_size) if group is tp_group else tensor,
    )
    inputs = attention_inputs(config, seq_len=seq_len, batch=1)
    with torch.no_grad():
        attention(**inputs)
    (ours,) = captured_topk
    assert ours.shape == (1, seq_len, TOPK) and ours.dtype == torch.int32
    # Rank 1 holds rows seq_len..2*seq_len of the full causal selection.
    expected = reference_topk(causal_scores(q, k, weights), TOPK, tie_break)[:, seq_len:]
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)
    other_policy = reference_topk(causal_scores(q, k, weights), TOPK, 3 - tie_break)
    assert not torch.equal(expected, other_policy[:, seq_len:]), "the scores must tie at k"
