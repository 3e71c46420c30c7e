"""pytest plugin for runs inside a patched Megatron-LM tree (`-p rebaser.testing.pytest_plugin`).

megatron.training imports `typing.override` (Python 3.12, PEP 698) while megatron-core's
sources otherwise run on 3.11. On 3.11 this provides the same no-op decorator, before any
test module imports megatron.

With $FORKKIT_PYTEST_LOG set, it also logs the run as it goes, a line each, flushed (what
junit XML cannot tell, since pytest writes it only at a run's end): how many tests were
collected, each test as it starts and as it ends with its outcome, and the end of the run.
A run that dies, hangs or is stopped early leaves in it the tests that ran and the one it
broke in. Tests are named as junit names them (`classname::name`).
"""

import os
import typing


def _override(method):
    try:
        method.__override__ = True
    except (AttributeError, TypeError):
        pass
    return method


if not hasattr(typing, "override"):
    typing.override = _override

_LOG_PATH = os.environ.get("FORKKIT_PYTEST_LOG")
_log = open(_LOG_PATH, "a", encoding="utf-8") if _LOG_PATH else None
_outcomes = {}  # nodeid -> the outcome of its phases so far


def _say(*fields):
    if _log is not None:
        _log.write("\t".join(str(field) for field in fields) + "\n")
        _log.flush()


def junit_name(nodeid):
    """The test's name in junit XML, as pytest's junitxml makes it (mangle_test_address,
    then bin_xml_escape); no line break in it but as `#xA`, so a log line holds it."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".")
    if names[0].endswith(".py"):
        names[0] = names[0][: -len(".py")]
    names[-1] += bracket + params
    name = _xml_escaped(".".join(names[:-1])) + "::" + _xml_escaped(names[-1])
    return name.replace("\n", "#xA").replace("\r", "#xD")


try:
    from _pytest.junitxml import bin_xml_escape as _xml_escaped
except ImportError:  # another pytest's layout: names as they are
    _xml_escaped = str


def pytest_collection_finish(session):
    _say("collected", len(session.items))


def pytest_runtest_logstart(nodeid, location):
    _say("start", junit_name(nodeid))


def pytest_runtest_logreport(report):
    """A test's outcome as junit gives it: its own failure first, else an error of its
    set-up or teardown, else a skip."""
    before = _outcomes.get(report.nodeid, "passed")
    if report.failed:
        now = "failed" if report.when == "call" else "error"
    elif report.skipped:
        now = "skipped"
    else:
        now = "passed"
    rank = ("passed", "skipped", "error", "failed")
    _outcomes[report.nodeid] = max(before, now, key=rank.index)


def pytest_runtest_logfinish(nodeid, location):
    _say("done", _outcomes.pop(nodeid, "passed"), junit_name(nodeid))


def pytest_sessionfinish(session, exitstatus):
    _say("finished", int(exitstatus))
