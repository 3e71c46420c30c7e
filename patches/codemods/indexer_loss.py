"""Patch 0004 by meaning: with an explicit top-k backend, DSAttention's indexer-loss path runs
the block-wise loss on the explicitly selected indices.

DSAttention.forward computes the loss with one upstream call; it now calls
`indexer_loss_function(...)` with the same inputs, which is upstream's callee without a plan
and the block-wise stand-in (same positional inputs, same result) with one:
* 0.17+ (0.19's `compute_indexer_loss_with_reference_path`, or 0.17-0.18's training branch):
  `FusedDSAIndexerLoss.apply(...)`, standing in `dsa_blockwise.indexer_loss_function(plan)`;
* 0.16, where the indexer's dense scores go straight into `compute_dsa_indexer_loss(...)`:
  `dsa_blockwise.preselected_loss_function(plan)`, which takes the indexer's inputs that
  patch 0003 hands on in place of the scores.
"""

from __future__ import annotations

from typing import Optional

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

LOSS_FUNCTION = "indexer_loss_function"
# Upstream's loss call in DSAttention.forward, and the block-wise stand-in for it, by shape.
STAND_INS = (
    ("FusedDSAIndexerLoss.apply", "dsa_blockwise.indexer_loss_function"),
    ("compute_dsa_indexer_loss", "dsa_blockwise.preselected_loss_function"),  # 0.16
)
CHOOSE = """
indexer_loss_function = (
    {upstream}
    if topk_policy is None
    else {stand_in}(topk_policy)
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
        if LOSS_FUNCTION in bound_names(attention):
            return tree
        if "topk_policy" not in bound_names(attention):
            raise self.missing("the local topk_policy in DSAttention.forward (patch 0003)")
        for upstream, stand_in in STAND_INS:
            sites = _call_statements(attention, upstream)
            if sites:
                break
        if len(sites) != 1:
            raise self.missing(
                "one statement in DSAttention.forward that returns or assigns "
                f"{' or '.join(f'`{name}(...)`' for name, _ in STAND_INS)}",
                [code(c.func) for name, _ in STAND_INS for c in calls(attention, name)],
            )
        ((block, statement),) = sites
        call = statement.body[0].value  # type: ignore[attr-defined]
        swapped = statement.deep_replace(call, call.with_changes(func=cst.Name(LOSS_FUNCTION)))
        choose = statements(CHOOSE.format(upstream=upstream, stand_in=stand_in))
        choose[0] = choose[0].with_changes(leading_lines=comment_lines(CHOOSE_COMMENT))
        body = replace_in_body(block, statement, swapped)
        body = insert_before(body, swapped, choose, gap=False)
        return tree.deep_replace(block, body)


def _call_statements(
    function: cst.FunctionDef, callee: str
) -> list[tuple[cst.IndentedBlock, cst.SimpleStatementLine]]:
    """(block, statement) for each `return callee(...)` / `x = callee(...)` statement in the
    function, nested blocks and functions included."""
    found: list[tuple[cst.IndentedBlock, cst.SimpleStatementLine]] = []

    class _Collect(cst.CSTVisitor):
        def visit_IndentedBlock(self, block: cst.IndentedBlock) -> None:
            for statement in block.body:
                if _calls_directly(statement, callee):
                    found.append((block, statement))  # type: ignore[arg-type]

    function.visit(_Collect())
    return found


def _calls_directly(statement: cst.BaseStatement, callee: str) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    value: Optional[cst.BaseExpression] = None
    if isinstance(small, (cst.Return, cst.Assign)):
        value = small.value
    return isinstance(value, cst.Call) and code(value.func) == callee
