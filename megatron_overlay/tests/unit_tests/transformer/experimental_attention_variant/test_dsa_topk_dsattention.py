# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Every top-k site of DSAttention honours the explicit backend, and the default (no backend)
is upstream's behaviour bit for bit, on every upstream generation; sites a generation does
not have (index sharing, sequence-local TP rows: 0.19+) are skipped there, by name."""

import inspect
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
    feed_indexer,
    tie_break,
):
    config = make_config(
        dsa_indexer_topk=TOPK,
        dsa_indexer_topk_backend="torch",
        dsa_indexer_topk_tie_break=tie_break,
    )
    attention = build_attention(config).eval()
    q, k, weights = tie_heavy_indexer(12, 2)
    feed_indexer(attention.indexer, q, k, weights)
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
    if not hasattr(dsa, "fused_qk_topk_naive"):
        pytest.skip("0.16 has no fused_qk_topk_naive (test_dsa_blockwise_select covers sk == 0)")
    q, _, weights = tie_heavy_indexer(5, 2)
    keys = torch.zeros(0, 2, q.size(-1))
    _, ours = dsa.fused_qk_topk_naive(
        q,
        keys,
        weights,
        TOPK,
        topk_policy=dsa_blockwise.BlockwisePlan(dsa_topk.TopkPolicy("torch", tie_break=1)),
    )
    assert ours.shape == (2, 5, 0)
    try:
        _, theirs = upstream_dsa.fused_qk_topk_naive(q, keys, weights, TOPK)
    except RuntimeError:  # v1 DSA takes min(k, sq) keys and fails when there are none
        return
    assert theirs.shape == ours.shape


def test_sparse_attention_takes_the_backend_indices_as_their_key_sets():
    """int32 indices with -1 in empty slots give the attention over the same keys as
    upstream's own int64 indices: 0.19's unfused attention gathers slot by slot and masks -1
    itself; v1's scatters the indices into a mask, once made scatter_ready (int64, an empty
    slot repeating its row's first key). Upstream's pass scatter_ready as the same tensor."""
    generator = torch.Generator().manual_seed(2)
    query, key, value = (torch.randn(6, 2, 3, 4, generator=generator) for _ in range(3))
    ours = torch.tensor([[0, -1, -1], [0, 1, -1], [0, 1, 2], [1, 3, -1], [2, 3, 4], [0, 4, 5]])
    ours = ours.expand(2, -1, -1).to(torch.int32)
    theirs = ours.long()
    if "scatter_ready" in inspect.getsource(dsa.unfused_dsa_fn):  # v1: a set of keys
        theirs = theirs.where(ours >= 0, theirs[..., :1])  # the same keys, one repeated
        assert torch.equal(dsa_blockwise.scatter_ready(ours), theirs)
    assert dsa_blockwise.scatter_ready(theirs) is theirs
    torch.testing.assert_close(
        dsa.unfused_dsa_fn(query, key, value, ours, 0.5),
        dsa.unfused_dsa_fn(query, key, value, theirs, 0.5),
        rtol=0,
        atol=0,
    )


def test_indexer_forward_uses_the_configured_backend(
    make_config, build_attention, feed_indexer, reference_topk
):
    config = make_config(
        dsa_indexer_topk=TOPK, dsa_indexer_topk_backend="torch", dsa_indexer_topk_tie_break=2
    )
    indexer = build_attention(config).indexer
    q, k, weights = tie_heavy_indexer(10, 1, seed=4)
    feed_indexer(indexer, q, k, weights)
    mask = torch.full((10, 10), float("-inf")).triu(1)
    scores, indices = indexer.forward_with_scores(
        torch.zeros(10, 1, 64), torch.zeros(10, 1, 32), mask
    )
    # Scored and selected block by block, never materialised: None, or on 0.16 (whose
    # DSAttention computes the loss from these scores) the inputs to score them again.
    assert scores is None or isinstance(scores, dsa_blockwise.IndexerInputs)
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

    if not hasattr(dsa, "fused_qk_topk_naive"):
        return  # 0.16 selects inside DSAIndexer: the outputs above cover it
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
    # The layer says once which scorer and selector it uses. (v1 DSA selects in DSAIndexer,
    # which does not know its layer, on the plain path, and on 0.16 on the loss path too:
    # there the line names layer "?".)
    lines = [r.getMessage() for r in caplog.records]
    layers = [line.split(":")[0] for line in lines]
    assert lines and len(set(layers)) == len(layers)
    assert set(layers) <= {"DSA indexer layer 2", "DSA indexer layer ?"}
    if hasattr(dsa, "_run_sparse_attention"):  # 0.19+: DSAttention selects with its plan
        assert layers == ["DSA indexer layer 2"]
    assert all("scores by torch" in line and "torch backend" in line for line in lines)


def test_without_a_backend_the_fused_kernels_do_run(
    make_config, build_attention, attention_inputs, fused_kernels_that_raise, monkeypatch
):
    """Control for the test above: the raising kernels are reachable when no backend is set
    (0.19+'s on the plain path; v1 DSA's dense ones on the indexer-loss path)."""
    config = make_config(dsa_indexer_loss_coeff=1.0, dsa_indexer_use_sparse_loss=True)
    attention = build_attention(config)
    no_loss_tracker(monkeypatch)
    with pytest.raises(AssertionError, match="internal top-k kernel .* must not run"):
        with torch.no_grad():
            attention.eval()(**attention_inputs(config))
        attention.train()(**attention_inputs(config)).sum().backward()


def test_index_sharing_layers_get_the_same_indices(
    make_config, build_attention, attention_inputs, captured_topk, feed_indexer
):
    if not hasattr(make_config(), "dsa_indexer_topk_freq"):
        pytest.skip("this base has no index sharing (dsa_indexer_topk_freq: 0.19+)")
    config = make_config(
        dsa_indexer_topk_freq=2, dsa_indexer_topk_backend="torch", dsa_indexer_topk_tie_break=2
    )
    computing = build_attention(config, layer_number=1).eval()
    sharing = build_attention(config, layer_number=2).eval()
    assert sharing.skip_topk and sharing.indexer is None and sharing.source_layer == 1
    feed_indexer(computing.indexer, *tie_heavy_indexer(12, 2, seed=3))
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
    feed_indexer,
):
    """TP rank 1 of 2 with sequence parallelism: the indexer sees all rows, attention its own,
    selected by the backend's tie policy on tie-heavy scores."""
    if "slice_topk_to_local_sequence_parallel_rows" not in inspect.getsource(dsa.DSAttention):
        pytest.skip("this base has no sequence-local top-k rows (0.19+)")
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
    feed_indexer(attention.indexer, q, k, weights)
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
