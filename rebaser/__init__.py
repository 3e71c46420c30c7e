"""dsa-forkkit's rebaser: lay an overlay and a patch series onto upstream Megatron-LM,
verify the result and test it."""

import gc

__version__ = "0.1.0"


def collect_rarely() -> None:
    """The cycle collector of one of rebaser's short processes (a command, a merge helper):
    their data hold few reference cycles, yet the structured merge's syntax trees (300,000
    nodes for a 3,000-line module) set off full collections of the whole heap again and
    again, a fifth of the CPU of an apply on a real fork. Young objects are still
    collected, in larger batches."""
    gc.set_threshold(100_000, 50, 100)
