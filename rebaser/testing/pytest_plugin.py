"""pytest plugin for runs inside a patched Megatron-LM tree (`-p rebaser.testing.pytest_plugin`).

megatron.training imports `typing.override` (Python 3.12, PEP 698) while megatron-core's
sources otherwise run on 3.11. On 3.11 this provides the same no-op decorator, before any
test module imports megatron.
"""

import typing


def _override(method):
    try:
        method.__override__ = True
    except (AttributeError, TypeError):
        pass
    return method


if not hasattr(typing, "override"):
    typing.override = _override
