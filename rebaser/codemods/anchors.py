"""The one failure a codemod reports, kept apart from LibCST: the steps and checks catch it
on every apply, and importing LibCST (half a second) is only worth it when a codemod runs."""

from __future__ import annotations

from typing import Sequence


class AnchorNotFound(Exception):
    def __init__(
        self, codemod: str, path: str, anchor: str, candidates: Sequence[str] = ()
    ) -> None:
        super().__init__(anchor)
        self.codemod = codemod
        self.path = path
        self.anchor = anchor
        self.candidates = list(candidates)

    def __str__(self) -> str:
        text = f"{self.path}: cannot find {self.anchor}"
        if self.candidates:
            text += f" (nearest candidates: {', '.join(self.candidates)})"
        return text
