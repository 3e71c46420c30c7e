"""`python -m rebaser` and the `rebaser` command (pyproject's entry point).

Loading rebaser takes a moment (rich, GitPython, LibCST): a Ctrl-C then ends it with one
line and exit 130, not a traceback. Everything after is cli.main's.
"""

import gc
import sys

# A command is one short process whose data hold few reference cycles, yet the structured
# merge's syntax trees (300,000 nodes for a 3,000-line module) set off full collections of
# the whole heap again and again: a fifth of the CPU of an apply on a real fork. Young
# objects are still collected, in larger batches.
_COLLECT_AFTER = (100_000, 50, 100)


def entry() -> int:
    gc.set_threshold(*_COLLECT_AFTER)
    try:
        from rebaser.cli import main
    except KeyboardInterrupt:
        print("interrupted while rebaser was starting; nothing was done", file=sys.stderr)
        return 130  # ExitCode.INTERRUPTED, not imported: it may be what was interrupted
    return main()


if __name__ == "__main__":
    raise SystemExit(entry())
