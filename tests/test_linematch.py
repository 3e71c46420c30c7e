"""carry/linematch.py: difflib's alignment of two files' lines with the common head and
tail aligned first, as the structured merge and recorded resolutions use it."""

from __future__ import annotations

import difflib
import random

from rebaser.carry import linematch


def _rebuilt(a: list[str], b: list[str]) -> list[str]:
    out: list[str] = []
    for tag, i1, i2, j1, j2 in linematch.opcodes(a, b):
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
            out += a[i1:i2]
        else:
            out += b[j1:j2]
    return out


def test_opcodes_turn_one_file_into_the_other() -> None:
    lines = ["a\n", "b\n", "c\n", "pass\n", "\n"]
    generator = random.Random(7)
    for _ in range(500):
        a = generator.choices(lines, k=generator.randrange(0, 12))
        b = generator.choices(lines, k=generator.randrange(0, 12))
        assert _rebuilt(a, b) == b
        ops = linematch.opcodes(a, b)
        assert all(x[0] != y[0] or x[0] != "equal" for x, y in zip(ops, ops[1:]))  # joined
        assert not ops or (ops[0][1], ops[0][3], ops[-1][2], ops[-1][4]) == (0, 0, len(a), len(b))


def test_a_change_inside_a_long_file_aligns_as_difflib_does() -> None:
    a = [f"line {n}\n" for n in range(3000)]
    b = a[:1500] + ["new\n", "lines\n"] + a[1501:]
    assert linematch.opcodes(a, b) == difflib.SequenceMatcher(None, a, b).get_opcodes()
    blocks = linematch.matching_blocks(a, b)
    assert blocks == [(0, 0, 1500), (1501, 1502, 1499), (3000, 3001, 0)]


def test_the_common_head_and_tail_stay_aligned_where_difflib_would_move_them() -> None:
    """A repeated block: difflib's longest match may pair a line of the head with the copy
    further down; lines both files share at their ends stay where they are."""
    a = ["x\n", "y\n", "x\n", "y\n", "x\n", "y\n"]
    b = ["x\n", "y\n", "z\n", "x\n", "y\n", "x\n", "y\n"]
    assert linematch.matching_blocks(a, b)[0] == (0, 0, 2)
    assert linematch.matching_blocks(a, b)[-2:] == [(2, 3, 4), (6, 7, 0)]
