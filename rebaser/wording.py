"""How rebaser says a count: "1 patch", "2 patches" (every layer's messages use it)."""

from __future__ import annotations


def counted(number: int, noun: str) -> str:
    """ "1 patch", "2 patches" (nouns ending in s, ch or x take -es)."""
    plural = noun + ("es" if noun.endswith(("s", "ch", "x")) else "s")
    return f"{number} {noun if number == 1 else plural}"
