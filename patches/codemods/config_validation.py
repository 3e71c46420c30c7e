"""Patch 0002 by meaning: call dsa_topk.validate_config(self) in TransformerConfig.__post_init__,
just before its attention-variant checks."""

from __future__ import annotations

import libcst as cst

from rebaser.codemods.base import (
    PatchCodemod,
    calls,
    code,
    comment_lines,
    insert_before,
    mentions,
    statements,
)

HOOK = """
from megatron.core.transformer.experimental_attention_variant import dsa_topk

dsa_topk.validate_config(self)
"""
COMMENT = "Imported here so the hook stays one hunk and adds no import-order coupling."
VARIANT = "self.experimental_attention_variant"


class ConfigValidation(PatchCodemod):
    NAME = "config_validation"
    PATH = "megatron/core/transformer/transformer_config.py"
    DESCRIPTION = "TransformerConfig.__post_init__: validate the top-k options"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        post_init = self.find_method(tree, "TransformerConfig", "__post_init__")
        if calls(post_init, "dsa_topk.validate_config"):
            return tree
        body = post_init.body
        anchor = self.find_statement(
            body,
            lambda statement: isinstance(statement, cst.If) and mentions(statement.test, VARIANT),
            f"an `if` on {VARIANT} in TransformerConfig.__post_init__",
            (
                f"line test `{code(s.test)[:60]}`"
                for s in body.body
                if isinstance(s, cst.If) and mentions(s.test, "attention")
            ),
        )
        hook = statements(HOOK)
        hook[0] = hook[0].with_changes(leading_lines=comment_lines(COMMENT))
        new_body = insert_before(body, anchor, hook)
        return tree.deep_replace(body, new_body)
