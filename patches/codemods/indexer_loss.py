"""Patch 0004 by meaning: the indexer-loss autograd function takes externally selected
top-k indices and its backward uses exactly those.

* `fwd_fused_indexer_loss_naive` takes `topk_indices` and hands them to the naive top-k as
  preselected indices;
* `_FUSED_DSA_INDEXER_LOSS_INPUT_NAMES` and `FusedDSAIndexerLoss.forward` gain `topk_indices`
  at the end (backward maps gradients by these names, so it returns None for it);
* `DSAttention.forward` selects with the explicit backend before the reference loss path
  (`select_topk_with_policy`) and passes the indices positionally to
  `FusedDSAIndexerLoss.apply`, filling any defaulted inputs in between.
"""

from __future__ import annotations

import libcst as cst

from rebaser.codemods.base import (
    PatchCodemod,
    add_keyword,
    add_positional,
    append_element,
    append_param,
    bound_names,
    function_in,
    calls,
    code,
    comment_lines,
    insert_before,
    mentions,
    param_names,
    statements,
)

NAMES = "_FUSED_DSA_INDEXER_LOSS_INPUT_NAMES"
FWD = "fwd_fused_indexer_loss_naive"
REFERENCE = "compute_indexer_loss_with_reference_path"  # DSAttention.forward's dense loss path
SELECT = """
def select_topk_with_policy():
    # Indices from the explicit top-k backend, or None to let the loss path select.
    if topk_policy is None:
        return None
    if use_fused_kernels:
        dsa_topk.warn_dense_indexer_loss_once()
    with torch.no_grad():
        _, selected = fused_qk_topk_naive(
            q,
            k,
            weights,
            self.index_topk,
            mask=float_mask,
            varlen_starts=varlen_starts,
            varlen_ends=varlen_ends,
            key_positions=key_positions,
            use_relu=self.config.dsa_indexer_scoring_relu,
            topk_policy=topk_policy,
        )
    return selected
"""
# Locals of DSAttention.forward that select_topk_with_policy reads.
SELECT_NEEDS = (
    "q",
    "k",
    "weights",
    "float_mask",
    "varlen_starts",
    "varlen_ends",
    "key_positions",
    "use_fused_kernels",
    "topk_policy",
)
FWD_COMMENT = (
    "Given topk_indices (chosen by an explicit top-k backend), the loss uses exactly those."
)
FORWARD_COMMENTS = (
    "topk_indices, when given, were selected outside: the forward returns them and the",
    "backward uses exactly them (it never re-selects); their gradient is None.",
)


class IndexerLoss(PatchCodemod):
    NAME = "indexer_loss"
    PATH = "megatron/core/transformer/experimental_attention_variant/dsa.py"
    DESCRIPTION = (
        "dsa.py: indexer loss keeps the explicitly selected indices in forward and backward"
    )
    REQUIRES = ("topk_dispatch",)  # reads the `topk_policy` that dispatch sets up in forward

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        tree = self._fwd_takes_indices(tree)
        tree, forward_params = self._autograd_input(tree)
        return self._attention_passes_indices(tree, forward_params)

    def _fwd_takes_indices(self, tree: cst.Module) -> cst.Module:
        fwd = self.find_function(tree, FWD)
        if "topk_indices" in param_names(fwd):
            return tree
        naive = calls(fwd, "fused_qk_topk_naive")
        if len(naive) != 1:
            raise self.missing(f"one fused_qk_topk_naive call in {FWD} (found {len(naive)})")
        updated = fwd.deep_replace(
            naive[0],
            add_keyword(naive[0], "topk_policy", "dsa_topk.preselected_or_none(topk_indices)"),
        )
        statement = next(s for s in updated.body.body if calls(s, "fused_qk_topk_naive"))
        updated = updated.deep_replace(
            statement,
            statement.with_changes(
                leading_lines=[*statement.leading_lines, *comment_lines(FWD_COMMENT)]
            ),
        )
        updated = append_param(updated, "topk_indices: Optional[torch.Tensor] = None")
        return tree.deep_replace(fwd, updated)

    def _autograd_input(self, tree: cst.Module) -> tuple[cst.Module, list[cst.Param]]:
        forward = self.find_method(tree, "FusedDSAIndexerLoss", "forward")
        inputs = param_names(forward)[1:]  # after ctx
        names = self._names_tuple(tree)
        elements = [element.value.evaluated_value for element in names.elements]  # type: ignore[union-attr]
        if "topk_indices" not in inputs:
            if inputs != elements:
                raise self.missing(
                    f"{NAMES} in the order of FusedDSAIndexerLoss.forward's inputs "
                    "(backward maps gradients by these names; align them by hand)",
                    [f"inputs: {', '.join(inputs)}", f"names: {', '.join(elements)}"],
                )
            backward = self.find_method(tree, "FusedDSAIndexerLoss", "backward")
            if not mentions(backward, NAMES):
                raise self.missing(f"FusedDSAIndexerLoss.backward mapping gradients by {NAMES}")
            fwd_calls = calls(forward, FWD)
            if len(fwd_calls) != 1:
                raise self.missing(f"one {FWD} call in FusedDSAIndexerLoss.forward")
            updated = forward.deep_replace(
                fwd_calls[0], add_keyword(fwd_calls[0], "topk_indices", "topk_indices")
            )
            statement = next(s for s in updated.body.body if calls(s, FWD))
            updated = updated.deep_replace(
                statement,
                statement.with_changes(
                    leading_lines=[*statement.leading_lines, *comment_lines(*FORWARD_COMMENTS)]
                ),
            )
            tree = tree.deep_replace(forward, append_param(updated, "topk_indices=None"))
        if "topk_indices" not in elements:
            names = self._names_tuple(tree)
            tree = tree.deep_replace(names, append_element(names, '"topk_indices"'))
        forward = self.find_method(tree, "FusedDSAIndexerLoss", "forward")
        return tree, list(forward.params.params)[1:]

    def _names_tuple(self, tree: cst.Module) -> cst.Tuple:
        for statement in tree.body:
            if isinstance(statement, cst.SimpleStatementLine) and isinstance(
                statement.body[0], cst.Assign
            ):
                assign = statement.body[0]
                if code(assign.targets[0].target) == NAMES and isinstance(assign.value, cst.Tuple):
                    return assign.value
        raise self.missing(f"the module-level tuple {NAMES}")

    def _attention_passes_indices(
        self, tree: cst.Module, forward_params: list[cst.Param]
    ) -> cst.Module:
        attention = self.find_method(tree, "DSAttention", "forward")
        reference = self.find_function(attention.body, REFERENCE, owner="DSAttention.forward")
        applies = calls(reference, "FusedDSAIndexerLoss.apply")
        if len(applies) != 1:
            raise self.missing(f"one FusedDSAIndexerLoss.apply call in {REFERENCE}")
        apply = applies[0]
        updated = attention
        if not any(code(arg.value) == "select_topk_with_policy()" for arg in apply.args):
            if any(arg.keyword is not None or arg.star for arg in apply.args):
                raise self.missing(
                    "FusedDSAIndexerLoss.apply called with positional arguments only"
                )
            names = [param.name.value for param in forward_params]
            target = names.index("topk_indices")
            given = len(apply.args)
            if given > target:
                raise self.missing(
                    f"FusedDSAIndexerLoss.apply with at most {target} positional inputs"
                )
            # Inputs between the call's last argument and topk_indices take their defaults.
            fill = [code(param.default) for param in forward_params[given:target] if param.default]
            if len(fill) != target - given:
                raise self.missing(f"defaults for FusedDSAIndexerLoss inputs {names[given:target]}")
            updated = updated.deep_replace(
                apply, add_positional(apply, [*fill, "select_topk_with_policy()"])
            )
        if function_in(updated.body, "select_topk_with_policy") is None:
            bound = bound_names(updated)
            absent = [name for name in SELECT_NEEDS if name not in bound]
            if absent:
                raise self.missing(f"the locals {', '.join(absent)} in DSAttention.forward")
            reference = function_in(updated.body, REFERENCE)
            updated = updated.with_changes(
                body=insert_before(updated.body, reference, statements(SELECT))
            )
        return tree.deep_replace(attention, updated)
