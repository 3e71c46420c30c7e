"""The codemod framework: the contract and helpers (base.py) and the runner that loads a
series' own codemods by path and runs them in declared order (runner.py).

The codemods themselves live with their series (patches/codemods/ for the DSA series), each
named by its patch's Forkkit-Codemod trailer.
"""

from rebaser.codemods.base import AnchorNotFound, PatchCodemod
from rebaser.codemods.runner import Codemods, load_codemods

__all__ = ["AnchorNotFound", "Codemods", "PatchCodemod", "load_codemods"]
