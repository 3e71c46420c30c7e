"""The codemod framework: the contract and helpers (base.py) and the runner that loads a
series' own codemods by path and runs them in declared order (runner.py).

The codemods themselves live with their series (patches/codemods/ for the DSA series), each
named by its patch's Forkkit-Codemod trailer. LibCST is imported only when a codemod is
loaded or run: an apply whose series has none never pays for it.
"""

from typing import Any

from rebaser.codemods.anchors import AnchorNotFound
from rebaser.codemods.runner import Codemods, load_codemods

__all__ = ["AnchorNotFound", "Codemods", "PatchCodemod", "load_codemods"]


def __getattr__(name: str) -> Any:
    if name == "PatchCodemod":  # the LibCST base class, on first use
        from rebaser.codemods.base import PatchCodemod

        return PatchCodemod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
