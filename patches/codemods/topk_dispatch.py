"""Patch 0003 by meaning: route DSA top-k selection in dsa.py through the explicit backend.

* import `dsa_blockwise` beside the other experimental_attention_variant modules;
* `fused_qk_topk_naive` takes `topk_policy` (a block-wise plan) and, when given, scores and
  selects in blocks of rows (`dsa_blockwise.select_topk`) before any dense scoring;
* `DSAIndexer.forward_with_scores` passes the configured plan;
* `DSAttention.forward` reads the plan once, keeps every fused kernel that selects its own
  top-k (guarded by `use_fused_kernels`) from running when a plan is set, and passes the
  plan to its naive top-k calls.

The same change on each upstream generation, recognised by its code (not its version):
* 0.19+ (NVIDIA main, dev): as above; the patch itself is this shape.
* 0.17-0.18 (v1 DSA): `fused_qk_topk_naive` takes only (q, k, weights, index_topk, mask),
  so the hook hands on the masks it has; DSAttention has no fused kernels, so the plan is
  read before its first top-k site; `unfused_dsa_fn` scatters the indices as they are
  (int64, no -1), so it first makes the backend's int32 / -1 indices `scatter_ready`.
* 0.16: no `fused_qk_topk_naive`; `DSAIndexer.forward_with_scores` scores and selects
  inline, so the hook sits there, before the dense scores, and hands the block-wise loss
  the indexer's inputs (`dsa_blockwise.IndexerInputs`) where the scores would go.
"""

from __future__ import annotations

import libcst as cst

from rebaser.codemods.base import (
    Body,
    PatchCodemod,
    add_keyword,
    append_import_name,
    append_param,
    blank_line,
    bound_names,
    calls,
    code,
    comment_lines,
    function_in,
    has_keyword,
    insert_before,
    mentions,
    nearest,
    param_names,
    replace_in_body,
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
POLICY_PARAM = "topk_policy: Optional[dsa_blockwise.BlockwisePlan] = None"
# Parameters of fused_qk_topk_naive that the block-wise path takes as they are: the first
# four on every generation, the masks as far as the base has them (0.17-0.18: mask only).
NAIVE_PARAMS = ("q", "k", "weights", "index_topk")
NAIVE_MASKS = ("mask", "varlen_starts", "varlen_ends", "key_positions", "use_relu")
EARLY_RETURN = """
if topk_policy is not None:
    return None, dsa_blockwise.select_topk(
        q,
        k,
        weights,
        index_topk,
        topk_policy,
{masks}    )
"""
EARLY_RETURN_COMMENT = (
    "An explicit top-k backend scores and selects in blocks of rows: the [b, sq, sk] scores",
    "are never materialised, so None stands in for them.",
)
READ_POLICY = "topk_policy = dsa_blockwise.plan_from_config(self.config, self.layer_number)\n"
READ_POLICY_COMMENT = (
    "An explicit top-k backend replaces every fused kernel that selects its own top-k."
)
NOT_SET = "topk_policy is None"
# Where DSAttention.forward gets its indices on bases without fused kernels (0.16-0.18).
TOPK_SITES = ("FusedDSAIndexerLoss.apply", "forward_with_scores", NAIVE)
V1_READ_POLICY_COMMENT = "An explicit top-k backend selects the indices (None: upstream's top-k)."
# 0.16: DSAIndexer.forward_with_scores scores inline; the hook goes before this call.
INLINE_SCORER = "self._compute_index_scores"
INLINE_HOOK = """
topk_policy = dsa_blockwise.plan_from_config(self.config)
if topk_policy is not None:
    return dsa_blockwise.IndexerInputs(q, k, weights, mask), dsa_blockwise.select_topk(
        q, k, weights, self.index_topk, topk_policy, mask=mask
    )
"""
INLINE_HOOK_COMMENT = (
    "An explicit top-k backend scores and selects in blocks of rows; the block-wise loss",
    "takes the indexer's inputs in place of the [b, sq, sk] scores it never materialises.",
)
# v1's sparse attention scatters the indices as they are: int64 only, and no -1.
UNFUSED_ATTENTION = "unfused_dsa_fn"
SCATTER_READY = "topk_indices = dsa_blockwise.scatter_ready(topk_indices)\n"
SCATTER_READY_COMMENT = (
    "The explicit top-k backends give int32 with -1 in empty slots; scatter_ takes neither."
)


class TopkDispatch(PatchCodemod):
    NAME = "topk_dispatch"
    PATH = "megatron/core/transformer/experimental_attention_variant/dsa.py"
    DESCRIPTION = "dsa.py: every top-k site honours dsa_indexer_topk_backend"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        tree = self._import_dsa_blockwise(tree)
        if function_in(tree, NAIVE) is not None:
            tree = self._naive_topk_hook(tree)
            tree = self._indexer_passes_policy(tree)
        else:
            tree = self._inline_topk_hook(tree)  # 0.16
        tree = self._attention_honours_policy(tree)
        return self._unfused_attention_takes_backend_indices(tree)

    def _import_dsa_blockwise(self, tree: cst.Module) -> cst.Module:
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
                if any(code(alias.name) == "dsa_blockwise" for alias in names):
                    return tree
                return tree.deep_replace(node, append_import_name(node, "dsa_blockwise"))
        # No grouped import of the package: add one after the module's last import.
        imports = [
            i
            for i, s in enumerate(tree.body)
            if isinstance(s, cst.SimpleStatementLine)
            and isinstance(s.body[0], (cst.Import, cst.ImportFrom))
        ]
        if not imports:
            raise self.missing("the module's imports")
        new = cst.parse_statement(f"from {PACKAGE} import dsa_blockwise\n")
        body = list(tree.body)
        body.insert(imports[-1] + 1, new)
        return tree.with_changes(body=body)

    def _naive_topk_hook(self, tree: cst.Module) -> cst.Module:
        naive = self.find_function(tree, NAIVE)
        if "topk_policy" in param_names(naive):
            return tree
        absent = [name for name in NAIVE_PARAMS if name not in param_names(naive)]
        if absent:
            raise self.missing(f"parameters {', '.join(absent)} of {NAIVE}", param_names(naive))
        masks = "".join(
            f"        {name}={name},\n" for name in NAIVE_MASKS if name in param_names(naive)
        )
        # The hook goes first, after the docstring: no dense scoring happens before it.
        hook = statements(EARLY_RETURN.format(masks=masks))
        hook[0] = hook[0].with_changes(leading_lines=comment_lines(*EARLY_RETURN_COMMENT))
        body = insert_before(naive.body, _first_after_docstring(naive), hook, gap=False)
        updated = append_param(naive.with_changes(body=body), POLICY_PARAM)
        return tree.deep_replace(naive, updated)

    def _inline_topk_hook(self, tree: cst.Module) -> cst.Module:
        """0.16: DSAIndexer.forward_with_scores scores and selects itself."""
        method = self.find_method(tree, "DSAIndexer", "forward_with_scores")
        if mentions(method.body, "dsa_blockwise.select_topk"):
            return tree
        scoring = self.find_statement(
            method.body,
            lambda statement: bool(calls(statement, INLINE_SCORER)),
            f"function {NAIVE} (0.17+), or the `{INLINE_SCORER}(...)` call in "
            "DSAIndexer.forward_with_scores (0.16)",
            nearest(NAIVE, [n.name.value for n in tree.body if isinstance(n, cst.FunctionDef)]),
        )
        absent = [name for name in ("q", "k", "weights", "mask") if name not in bound_names(method)]
        if absent:
            raise self.missing(f"{', '.join(absent)} in DSAIndexer.forward_with_scores")
        hook = statements(INLINE_HOOK)
        hook[0] = hook[0].with_changes(leading_lines=comment_lines(*INLINE_HOOK_COMMENT))
        # The scoring keeps its own comments; the hook goes above them.
        scoring_after = scoring.with_changes(leading_lines=[blank_line(), *scoring.leading_lines])
        body = replace_in_body(method.body, scoring, [*hook, scoring_after])
        return tree.deep_replace(method, method.with_changes(body=body))

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
                    add_keyword(call, "topk_policy", "dsa_blockwise.plan_from_config(self.config)"),
                )
        return tree.deep_replace(method, updated)

    def _attention_honours_policy(self, tree: cst.Module) -> cst.Module:
        forward = self.find_method(tree, "DSAttention", "forward")
        fused = any(calls(forward, kernel) for kernel in FUSED_TOPK_KERNELS)
        updated = forward
        if not mentions(forward.body, READ_POLICY.strip()):
            read = self._read_policy if fused else self._read_policy_before_topk
            updated = updated.with_changes(body=read(updated.body))
        updated = updated.visit(_GuardFusedTopk())
        for call in calls(updated, NAIVE):
            if not has_keyword(call, "topk_policy"):
                updated = updated.deep_replace(
                    call, add_keyword(call, "topk_policy", "topk_policy")
                )
        return tree.deep_replace(forward, updated)

    def _read_policy(self, body: cst.IndentedBlock) -> Body:
        assignment = self.find_statement(
            body,
            lambda statement: isinstance(statement, cst.SimpleStatementLine)
            and mentions(statement, "use_fused_kernels ="),
            "the `use_fused_kernels = ...` assignment in DSAttention.forward",
            (code(c.func) for c in calls(body, "use_fused_dsa_kernels")),
        )
        read = cst.parse_statement(READ_POLICY).with_changes(
            leading_lines=comment_lines(READ_POLICY_COMMENT)
        )
        return replace_in_body(body, assignment, [assignment, read])

    def _read_policy_before_topk(self, body: cst.IndentedBlock) -> Body:
        """v1 DSA (0.16-0.18): no fused kernels; the plan is read before the first top-k."""
        site = self.find_statement(
            body,
            lambda statement: any(calls(statement, name) for name in TOPK_SITES),
            f"a top-k site ({', '.join(TOPK_SITES)}) in DSAttention.forward",
        )
        read = cst.parse_statement(READ_POLICY).with_changes(
            leading_lines=comment_lines(V1_READ_POLICY_COMMENT)
        )
        return insert_before(body, site, [read])

    def _unfused_attention_takes_backend_indices(self, tree: cst.Module) -> cst.Module:
        """v1 DSA: unfused_dsa_fn scatters the indices as they are; 0.19's masks -1 itself."""
        attention = function_in(tree, UNFUSED_ATTENTION)
        if attention is None or mentions(attention.body, SCATTER_READY.strip()):
            return tree
        if not any(_scatters_raw_indices(call) for call in calls(attention, "scatter_")):
            return tree
        ready = cst.parse_statement(SCATTER_READY).with_changes(
            leading_lines=comment_lines(SCATTER_READY_COMMENT)
        )
        body = insert_before(attention.body, _first_after_docstring(attention), [ready])
        return tree.deep_replace(attention, attention.with_changes(body=body))


def _first_after_docstring(function: cst.FunctionDef) -> cst.BaseStatement:
    body = function.body.body
    return body[1] if body and _is_docstring(body[0]) and len(body) > 1 else body[0]


def _scatters_raw_indices(call: cst.Call) -> bool:
    """`x.scatter_(-1, topk_indices, ...)`: the indices used as scatter positions."""
    return len(call.args) >= 2 and code(call.args[1].value) == "topk_indices"


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
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
