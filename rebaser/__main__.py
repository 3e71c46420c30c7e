"""`python -m rebaser` and the `rebaser` command (pyproject's entry point).

Loading rebaser takes a moment (rich, GitPython, LibCST): a Ctrl-C then ends it with one
line and exit 130, not a traceback. Everything after is cli.main's.
"""

import sys


def entry() -> int:
    try:
        from rebaser.cli import main
    except KeyboardInterrupt:
        print("interrupted while rebaser was starting; nothing was done", file=sys.stderr)
        return 130  # ExitCode.INTERRUPTED, not imported: it may be what was interrupted
    return main()


if __name__ == "__main__":
    raise SystemExit(entry())
