"""Patch 0001 by meaning: add the top-k fields to TransformerConfig after its last dsa_* field."""

from __future__ import annotations

import libcst as cst

from rebaser.codemods.base import PatchCodemod, blank_line, statements

FIELDS = '''
dsa_indexer_topk_backend: Optional[Literal["torch", "flashinfer"]] = None
"""Explicit top-k backend for the DSA indexer. None keeps the default selection (the fused
    kernels of dsa_kernel_backend, else torch.topk). "torch" selects exactly with the tie policy
    below on CPU and GPU; "flashinfer" uses flashinfer.top_k on CUDA (k <= 2048). With a backend
    set, the fused top-k kernels never run."""

dsa_indexer_topk_deterministic: bool = False
"""Whether the explicit DSA top-k backend must return bit-identical indices run after run."""

dsa_indexer_topk_tie_break: Literal[0, 1, 2] = 0
"""Tie policy at the k-th DSA indexer score: 0 unset (the backend's choice), 1 prefer small
    indices, 2 prefer large indices. Needs dsa_indexer_topk_backend."""
'''


def _field_name(statement: cst.CSTNode) -> str | None:
    if isinstance(statement, cst.SimpleStatementLine) and isinstance(
        statement.body[0], cst.AnnAssign
    ):
        target = statement.body[0].target
        return target.value if isinstance(target, cst.Name) else None
    return None


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


class ConfigFields(PatchCodemod):
    NAME = "config_fields"
    PATH = "megatron/core/transformer/transformer_config.py"
    DESCRIPTION = "TransformerConfig: dsa_indexer_topk_backend / _deterministic / _tie_break fields"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        config = self.find_class(tree, "TransformerConfig")
        body = list(config.body.body)
        existing = {_field_name(statement) for statement in body}
        additions = _missing_fields(statements(FIELDS), existing)
        if not additions:
            return tree
        at = self._after_last_dsa_field(body, existing)
        additions[0] = additions[0].with_changes(leading_lines=[blank_line()])
        new_body = config.body.with_changes(body=[*body[:at], *additions, *body[at:]])
        return tree.deep_replace(config, config.with_changes(body=new_body))

    def _after_last_dsa_field(self, body: list[cst.BaseStatement], existing: set) -> int:
        """Where the new fields go: after the last dsa_* field and its docstring."""
        dsa_fields = [i for i, s in enumerate(body) if (_field_name(s) or "").startswith("dsa_")]
        if not dsa_fields:
            raise self.missing(
                "a dsa_* field in class TransformerConfig",
                [name for name in existing if name and "topk" in name],
            )
        at = dsa_fields[-1] + 1
        return at + 1 if at < len(body) and _is_docstring(body[at]) else at


def _missing_fields(
    new_statements: list[cst.BaseStatement], existing: set
) -> list[cst.BaseStatement]:
    """The new fields (each with the docstring after it) the class does not have yet."""
    additions: list[cst.BaseStatement] = []
    keep = False
    for statement in new_statements:
        name = _field_name(statement)
        if name is not None:
            keep = name not in existing
        if keep:
            additions.append(statement)
    return additions
