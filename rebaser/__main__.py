"""`python -m rebaser` and the `rebaser` command (pyproject's entry point).

Loading rebaser takes a moment (rich, GitPython, LibCST): a Ctrl-C then ends it with one
line and exit 130, not a traceback. Everything after is cli.main's; around it, a standard
stream closed at start becomes /dev/null, and the process ends without freeing its objects.
"""

import atexit
import os
import sys

from rebaser import collect_rarely


def entry() -> int:
    _standard_streams()
    collect_rarely()
    # The first exit handler registered runs last. One registered before rebaser started
    # (by a .pth file: coverage's, say) would run after it: not ending early then.
    if getattr(atexit, "_ncallbacks", lambda: 1)() == 0:
        atexit.register(_end_now)
    try:
        from rebaser.cli import main
    except KeyboardInterrupt:
        print("interrupted while rebaser was starting; nothing was done", file=sys.stderr)
        _ending.append(130)
        return 130  # ExitCode.INTERRUPTED, not imported: it may be what was interrupted
    _ending.append(main())
    return _ending[-1]


def _standard_streams() -> None:
    """A standard stream closed when rebaser started (a cron job, a service, `>&-`) is
    /dev/null: Python leaves sys.stdout None there, and the first file rebaser opened would
    take the free descriptor, for git's output to land in."""
    for descriptor, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is None:
            null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
            if null != descriptor:
                os.dup2(null, descriptor)
                os.close(null)
            setattr(sys, name, open(descriptor, mode, encoding="utf-8", closefd=False))


# The code entry() returned, once it has (an exception leaves it empty: Python's own exit).
_ending: list[int] = []


def _end_now() -> None:
    """After the threads are joined and every other exit handler (finalizers, logging) has
    run: end the process without freeing its objects one by one. A command's syntax trees
    and caches took 0.13 s to free, a seventh of a `skip` at a stop on a real fork. Nothing
    of rebaser's is done in `__del__`: files are written and closed in `with` blocks."""
    if not _ending:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # a closed pipe or stream: Python's own exit reports it
        return
    os._exit(_ending[-1])


if __name__ == "__main__":
    raise SystemExit(entry())
