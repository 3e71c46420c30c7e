"""What an unexpected exception leaves behind: one line for the user, the traceback in a log.

Anything that is not a RebaserError is a bug in rebaser (or a fault it does not know yet). It
exits with its own code (ExitCode.INTERNAL), never 1 ("tests failed"), so CI cannot mistake it
for a result.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

from rebaser.config import cache_dir


def write_log(error: BaseException, argv: list[str]) -> Optional[Path]:
    """Write the traceback to `<cache>/logs/` (the temp folder when the cache is unusable);
    None when neither can be written."""
    text = (
        f"rebaser {' '.join(argv)}\n"
        f"pid {os.getpid()}, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n\n"
        + "".join(traceback.format_exception(error))
    )
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for folder in (cache_dir() / "logs", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
            return folder / name
        except OSError:
            continue
    return None


def summary(error: BaseException) -> str:
    """`Type: message (at file:line in function)`, from the innermost frame of rebaser's own
    code (or the innermost frame at all when the fault is in a library)."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if f"{os.sep}rebaser{os.sep}" in frame.filename]
    message = " ".join(str(error).split()) or "(no message)"
    if not (ours or frames):
        return f"{type(error).__name__}: {message}"
    frame = (ours or frames)[-1]
    return (
        f"{type(error).__name__}: {message} "
        f"(at {_short(frame.filename)}:{frame.lineno} in {frame.name})"
    )


def _short(filename: str) -> str:
    marker = f"{os.sep}rebaser{os.sep}"
    return "rebaser/" + filename.rsplit(marker, 1)[1] if marker in filename else filename
