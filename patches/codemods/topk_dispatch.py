"""Patch 0003 by meaning: route DSA top-k selection in dsa.py through the explicit backend.

* import `dsa_topk` beside the other experimental_attention_variant modules;
* `fused_qk_topk_naive` takes `topk_policy` and, when given, returns the backend's indices
  instead of running torch.topk;
* `DSAIndexer.forward_with_scores` passes the configured policy;
* `DSAttention.forward` reads the policy once, keeps every fused kernel that selects its own
  top-k (guarded by `use_fused_kernels`) from running when a policy is set, and passes the
  policy to its naive top-k calls.
"""

from __future__ import annotations

import libcst as cst

from rebaser.codemods.base import (
    Body,
    PatchCodemod,
    add_keyword,
    append_import_name,
    append_param,
    calls,
    code,
    comment_lines,
    has_keyword,
    insert_before,
    mentions,
    param_names,
    statements,
)

PACKAGE = "megatron.core.transformer.experimental_attention_variant"
NAIVE = "fused_qk_topk_naive"
# Fused kernels that select their own top-k; an explicit policy must keep them from running.
FUSED_TOPK_KERNELS = (
    "run_fused_dsa_attention",
    "build_fused_indexer_varlen_bounds",
    "run_fused_qk_topk",
    "run_fused_qk_topk_with_loss",
)
POLICY_PARAM = "topk_policy: Optional[dsa_topk.TopkSelector] = None"
EARLY_RETURN = """
if topk_policy is not None:
    return index_scores, dsa_topk.select_topk_indices(index_scores, index_topk, topk_policy)
"""
EARLY_RETURN_COMMENT = (
    "An explicit top-k backend (or indices selected before the call) replaces torch.topk."
)
READ_POLICY = "topk_policy = dsa_topk.policy_from_config(self.config)\n"
READ_POLICY_COMMENT = (
    "An explicit top-k backend replaces every fused kernel that selects its own top-k."
)
NOT_SET = "topk_policy is None"


class TopkDispatch(PatchCodemod):
    NAME = "topk_dispatch"
    PATH = "megatron/core/transformer/experimental_attention_variant/dsa.py"
    DESCRIPTION = "dsa.py: every top-k site honours dsa_indexer_topk_backend"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        tree = self._import_dsa_topk(tree)
        tree = self._naive_topk_hook(tree)
        tree = self._indexer_passes_policy(tree)
        return self._attention_honours_policy(tree)

    def _import_dsa_topk(self, tree: cst.Module) -> cst.Module:
        for statement in tree.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            node = statement.body[0]
            if (
                isinstance(node, cst.ImportFrom)
                and node.module is not None
                and code(node.module) == PACKAGE
            ):
                names = [] if isinstance(node.names, cst.ImportStar) else list(node.names)
                if any(code(alias.name) == "dsa_topk" for alias in names):
                    return tree
                return tree.deep_replace(node, append_import_name(node, "dsa_topk"))
        # No grouped import of the package: add one after the module's last import.
        imports = [
            i
            for i, s in enumerate(tree.body)
            if isinstance(s, cst.SimpleStatementLine)
            and isinstance(s.body[0], (cst.Import, cst.ImportFrom))
        ]
        if not imports:
            raise self.missing("the module's imports")
        new = cst.parse_statement(f"from {PACKAGE} import dsa_topk\n")
        body = list(tree.body)
        body.insert(imports[-1] + 1, new)
        return tree.with_changes(body=body)

    def _naive_topk_hook(self, tree: cst.Module) -> cst.Module:
        naive = self.find_function(tree, NAIVE)
        if "topk_policy" in param_names(naive):
            return tree
        for name in ("index_topk",):
            if name not in param_names(naive):
                raise self.missing(f"parameter {name} of {NAIVE}", param_names(naive))
        if not mentions(naive.body, "index_scores ="):
            raise self.missing(f"the local index_scores in {NAIVE}")
        anchor = next(
            (s for s in naive.body.body if mentions(s, ".topk(") or mentions(s, "topk_k =")),
            None,
        )
        if anchor is None:
            raise self.missing(f"the torch.topk selection in {NAIVE}")
        hook = statements(EARLY_RETURN)
        hook[0] = hook[0].with_changes(leading_lines=comment_lines(EARLY_RETURN_COMMENT))
        body = insert_before(naive.body, anchor, hook, gap=False)
        updated = append_param(naive.with_changes(body=body), POLICY_PARAM)
        return tree.deep_replace(naive, updated)

    def _indexer_passes_policy(self, tree: cst.Module) -> cst.Module:
        method = self.find_method(tree, "DSAIndexer", "forward_with_scores")
        naive_calls = calls(method, NAIVE)
        if not naive_calls:
            raise self.missing(f"the {NAIVE} call in DSAIndexer.forward_with_scores")
        updated = method
        for call in naive_calls:
            if not has_keyword(call, "topk_policy"):
                updated = updated.deep_replace(
                    call,
                    add_keyword(call, "topk_policy", "dsa_topk.policy_from_config(self.config)"),
                )
        return tree.deep_replace(method, updated)

    def _attention_honours_policy(self, tree: cst.Module) -> cst.Module:
        forward = self.find_method(tree, "DSAttention", "forward")
        updated = forward
        if not mentions(forward.body, READ_POLICY.strip()):
            updated = updated.with_changes(body=self._read_policy(updated.body))
        updated = updated.visit(_GuardFusedTopk())
        for call in calls(updated, NAIVE):
            if not has_keyword(call, "topk_policy"):
                updated = updated.deep_replace(
                    call, add_keyword(call, "topk_policy", "topk_policy")
                )
        return tree.deep_replace(forward, updated)

    def _read_policy(self, body: cst.IndentedBlock) -> Body:
        for statement in body.body:
            if mentions(statement, "use_fused_kernels =") and isinstance(
                statement, cst.SimpleStatementLine
            ):
                read = cst.parse_statement(READ_POLICY).with_changes(
                    leading_lines=comment_lines(READ_POLICY_COMMENT)
                )
                items = []
                for item in body.body:
                    items.append(item)
                    if item is statement:
                        items.append(read)
                return body.with_changes(body=items)
        raise self.missing(
            "the `use_fused_kernels = ...` assignment in DSAttention.forward",
            [code(c.func) for c in calls(body, "use_fused_dsa_kernels")],
        )


class _GuardFusedTopk(cst.CSTTransformer):
    """`if use_fused_kernels ...:` around a fused top-k kernel gains `and topk_policy is None`."""

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        test = updated.test
        if not mentions(test, "use_fused_kernels") or mentions(test, NOT_SET):
            return updated
        if not any(calls(updated.body, kernel) for kernel in FUSED_TOPK_KERNELS):
            return updated
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
            test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        guard = cst.BooleanOperation(
            left=test, operator=cst.And(), right=cst.parse_expression(NOT_SET)
        )
        return updated.with_changes(test=guard)
