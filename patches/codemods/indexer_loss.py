"""Patch 0004 by meaning: with an explicit top-k backend, DSAttention's reference indexer-loss
path runs the block-wise loss on the explicitly selected indices.

`compute_indexer_loss_with_reference_path` (nested in `DSAttention.forward`) returns
`FusedDSAIndexerLoss.apply(...)`; it now calls `indexer_loss_function(...)` with the same
inputs, which is `FusedDSAIndexerLoss.apply` without a plan and
`dsa_blockwise.indexer_loss_function(topk_policy)` (same positional inputs, same result)
with one.
"""

from __future__ import annotations

import libcst as cst

from rebaser.codemods.base import (
    PatchCodemod,
    bound_names,
    calls,
    code,
    comment_lines,
    insert_before,
    replace_in_body,
    statements,
)

REFERENCE = "compute_indexer_loss_with_reference_path"  # DSAttention.forward's dense loss path
APPLY = "FusedDSAIndexerLoss.apply"
LOSS_FUNCTION = "indexer_loss_function"
CHOOSE = """
indexer_loss_function = (
    FusedDSAIndexerLoss.apply
    if topk_policy is None
    else dsa_blockwise.indexer_loss_function(topk_policy)
)
"""
CHOOSE_COMMENT = "An explicit top-k backend selects, and the loss runs, in blocks of rows."


class IndexerLoss(PatchCodemod):
    NAME = "indexer_loss"
    PATH = "megatron/core/transformer/experimental_attention_variant/dsa.py"
    DESCRIPTION = "dsa.py: indexer loss in blocks of rows on the explicitly selected indices"
    REQUIRES = ("topk_dispatch",)  # reads the `topk_policy` that dispatch sets up in forward

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        attention = self.find_method(tree, "DSAttention", "forward")
        reference = self.find_function(attention.body, REFERENCE, owner="DSAttention.forward")
        if LOSS_FUNCTION in bound_names(reference):
            return tree
        if "topk_policy" not in bound_names(attention):
            raise self.missing("the local topk_policy in DSAttention.forward (patch 0003)")
        returns = [
            statement
            for statement in reference.body.body
            if isinstance(statement, cst.SimpleStatementLine)
            and isinstance(statement.body[0], cst.Return)
            and isinstance(statement.body[0].value, cst.Call)
            and code(statement.body[0].value.func) == APPLY
        ]
        if len(returns) != 1:
            raise self.missing(
                f"one `return {APPLY}(...)` in {REFERENCE}",
                [code(call.func) for call in calls(reference, APPLY)],
            )
        (statement,) = returns
        call = statement.body[0].value  # type: ignore[union-attr]
        swapped = statement.deep_replace(call, call.with_changes(func=cst.Name(LOSS_FUNCTION)))
        choose = statements(CHOOSE)
        choose[0] = choose[0].with_changes(leading_lines=comment_lines(CHOOSE_COMMENT))
        body = replace_in_body(reference.body, statement, swapped)
        body = insert_before(body, swapped, choose, gap=False)
        return tree.deep_replace(reference, reference.with_changes(body=body))
