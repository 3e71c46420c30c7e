"""What the tests' pytest plugin logged of a run as it went (rebaser/testing/pytest_plugin.py).

pytest writes its junit XML only at a run's end: a run that dies or hangs leaves none, and a
run stopped early (`pytest.exit`, a plugin) leaves out the tests it never reached. The log
tells what junit cannot: how many tests were collected, the outcome of each that ended, and
the one the run broke in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ENV = "FORKKIT_PYTEST_LOG"  # where the plugin logs


@dataclass
class RunLog:
    collected: Optional[int] = None  # None: the run never finished collecting
    done: dict[str, str] = field(default_factory=dict)  # test -> outcome, as they ended
    ended: int = 0  # tests that ended (a test may run twice under one name)
    running: Optional[str] = None  # the test that started and never ended: where it broke

    @classmethod
    def read(cls, path: Path) -> RunLog:
        log = cls()
        if not path.is_file():
            return log
        # Lines end in "\n" only: a test's id may hold other line breaks (U+2028).
        for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
            kind, _, rest = line.partition("\t")
            if kind == "collected" and rest.isdigit():
                log.collected = int(rest)
            elif kind == "start":
                log.running = rest
            elif kind == "done" and "\t" in rest:
                outcome, _, test = rest.partition("\t")
                log.done[test] = outcome
                log.ended += 1
                log.running = None
        return log

    @property
    def stopped_early(self) -> bool:
        """Whether the run ended before every collected test did."""
        return self.collected is not None and self.ended < self.collected
