# Carried by dsa-forkkit (overlay file, not part of upstream Megatron-LM).

"""Selector-preserving backward: the indexer-loss autograd function takes externally
selected indices, and its gradients are those of the loss on exactly those indices.

Upstream computes the indexer scores and loss in float32 (masks must be float32), so the
comparisons use float32 tolerances: the analytic backward against autograd of the same loss.
"""

import inspect
from types import SimpleNamespace

import pytest
import torch

from megatron.core.transformer.experimental_attention_variant import dsa, dsa_topk

SEQ, BATCH, HEADS, DIM, INDEX_HEADS, INDEX_DIM, TOPK = 6, 2, 2, 4, 3, 5, 3
SCALE, COEFF = 0.5, 0.7


def single_rank():
    group = SimpleNamespace(size=lambda: 1, rank=lambda: 0)
    return SimpleNamespace(tp=group, cp=group)


def loss_inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape, grad=False):
        return torch.randn(*shape, generator=generator).requires_grad_(grad)

    return dict(
        q=rand(SEQ, BATCH, INDEX_HEADS, INDEX_DIM, grad=True),
        weights=rand(SEQ, BATCH, INDEX_HEADS, grad=True),
        k=rand(SEQ, BATCH, INDEX_DIM, grad=True),
        query=rand(SEQ, BATCH, HEADS, DIM),
        key=rand(SEQ, BATCH, HEADS, DIM),
        mask=torch.full((SEQ, SEQ), float("-inf")).triu(1),
    )


def chosen_indices(seed=1):
    """Causally valid keys that are NOT the top-k: an arbitrary selection, -1 where short."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(BATCH):
        batch_rows = []
        for row in range(SEQ):
            keys = torch.randperm(row + 1, generator=generator)[:TOPK].tolist()
            batch_rows.append(keys + [-1] * (TOPK - len(keys)))
        rows.append(batch_rows)
    return torch.tensor(rows, dtype=torch.int32)


def fused_loss(inputs, topk_indices, sparse_loss=True):
    """FusedDSAIndexerLoss with the externally selected indices, inputs placed by name (as
    upstream maps them), so inputs added upstream keep their defaults."""
    given = dict(
        q=inputs["q"],
        weights=inputs["weights"],
        k=inputs["k"],
        query=inputs["query"],
        key=inputs["key"],
        softmax_scale=SCALE,
        topk=TOPK,
        loss_coeff=COEFF,
        mask=inputs["mask"],
        sparse_loss=sparse_loss,
        pg_collection=single_rank(),
        topk_indices=topk_indices,
    )
    defaults = inspect.signature(dsa.FusedDSAIndexerLoss.forward).parameters
    args = [
        given.get(name, defaults[name].default) for name in dsa._FUSED_DSA_INDEXER_LOSS_INPUT_NAMES
    ]
    return dsa.FusedDSAIndexerLoss.apply(*args)


def dense_reference_loss(inputs, topk_indices, sparse_loss=True):
    """The same loss through plain autograd: index scores, then compute_dsa_indexer_loss."""
    scores = dsa._compute_index_scores(inputs["q"], inputs["weights"], inputs["k"])
    return dsa.compute_dsa_indexer_loss(
        scores,
        topk_indices,
        inputs["query"],
        inputs["key"],
        SCALE,
        COEFF,
        sparse_loss,
        single_rank(),
        mask=inputs["mask"],
    )


def grads(loss, inputs):
    return torch.autograd.grad(loss, [inputs["q"], inputs["weights"], inputs["k"]])


@pytest.mark.parametrize("sparse_loss", [True, False])
def test_backward_matches_dense_reference_on_the_given_indices(sparse_loss):
    chosen = chosen_indices()
    inputs = loss_inputs()
    returned, loss = fused_loss(inputs, chosen, sparse_loss)
    assert torch.equal(returned, chosen)  # the forward hands back exactly the given indices
    reference_inputs = loss_inputs()
    reference = dense_reference_loss(reference_inputs, chosen, sparse_loss)
    torch.testing.assert_close(loss, reference, rtol=1e-6, atol=1e-7)
    for ours, theirs in zip(grads(loss, inputs), grads(reference, reference_inputs)):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-6)


def test_gradients_follow_the_selection():
    """Other indices give other gradients: the check above can tell them apart."""
    inputs, other = loss_inputs(), loss_inputs()
    _, loss = fused_loss(inputs, chosen_indices(seed=1))
    _, other_loss = fused_loss(other, chosen_indices(seed=2))
    assert not torch.allclose(grads(loss, inputs)[0], grads(other_loss, other)[0])


def test_backward_never_reselects(monkeypatch):
    inputs = loss_inputs()
    _, loss = fused_loss(inputs, chosen_indices())
    selections = []
    monkeypatch.setattr(dsa_topk, "select_topk", lambda *a, **k: selections.append(a))
    monkeypatch.setattr(torch.Tensor, "topk", lambda *a, **k: selections.append(a))
    loss.backward()
    assert selections == [] and inputs["q"].grad is not None


def test_without_indices_upstream_selection_is_kept():
    inputs = loss_inputs()
    returned, _ = fused_loss(inputs, None)
    scores = dsa._compute_index_scores(inputs["q"], inputs["weights"], inputs["k"]) + inputs["mask"]
    assert returned.dtype == torch.int64
    assert torch.equal(
        returned,
        scores.topk(TOPK, dim=-1).indices.masked_fill(
            scores.topk(TOPK, dim=-1).values == float("-inf"), -1
        ),
    )


def test_input_names_match_forward_inputs_and_gradients(monkeypatch):
    names = dsa._FUSED_DSA_INDEXER_LOSS_INPUT_NAMES
    params = list(inspect.signature(dsa.FusedDSAIndexerLoss.forward).parameters)[1:]
    assert list(names) == params and names[-1] == "topk_indices"
    returned = []
    original = dsa.FusedDSAIndexerLoss.backward

    def record(ctx, *grad_outputs):
        returned.append(original(ctx, *grad_outputs))
        return returned[-1]

    monkeypatch.setattr(dsa.FusedDSAIndexerLoss, "backward", staticmethod(record))
    inputs = loss_inputs()
    _, loss = fused_loss(inputs, chosen_indices())
    loss.backward()  # autograd itself rejects a gradient tuple of the wrong length
    (gradients,) = returned
    assert len(gradients) == len(names)
    assert gradients[names.index("topk_indices")] is None


def test_dsattention_backward_uses_the_forward_selection(
    make_config, build_attention, attention_inputs, captured_topk, monkeypatch
):
    config = make_config(
        dsa_indexer_topk_backend="torch",
        dsa_indexer_topk_tie_break=1,
        dsa_indexer_loss_coeff=1.0,
        dsa_indexer_use_sparse_loss=True,
    )
    attention = build_attention(config).train()
    monkeypatch.setattr(
        dsa.DSAIndexerLossLoggingHelper, "save_loss_to_tracker", staticmethod(lambda **_: None)
    )
    used_in_backward = []
    original = dsa.bwd_fused_indexer_loss_naive

    def record(*args, **kwargs):
        used_in_backward.append(args[5].clone())  # topk_indices
        return original(*args, **kwargs)

    monkeypatch.setattr(dsa, "bwd_fused_indexer_loss_naive", record)
    attention(**attention_inputs(config)).sum().backward()
    (forward_indices,) = captured_topk
    (backward_indices,) = used_in_backward
    assert forward_indices.dtype == backward_indices.dtype == torch.int32
    assert torch.equal(forward_indices, backward_indices)
    assert all(p.grad is not None for p in attention.indexer.parameters())
