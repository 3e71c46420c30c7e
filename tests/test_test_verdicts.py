"""What a failing, erroring or skipped test of the overlay's suite is taken for, on a machine
without a GPU: a test that needs one is listed as not run, never as a failure; every other
failure fails the suite. Each case from a hostile review of the verdicts (docs/safety.md,
ninth pass), through a real `rebaser apply` of a two-patch series whose overlay holds the
test file."""

from __future__ import annotations

import json

import pytest
from synthetic import two_patch_series

from rebaser.errors import ExitCode

# Plain CPU bugs that only mention a GPU word: each used to read "needs a GPU: not run"
# and the apply exited 0.
PLAIN_FAILURES = {
    "a backend compared": "def pick():\n    return 'nccl'\n\n\ndef test_x():\n    assert pick() == 'gloo'\n",
    "a keyword": "def make(hidden):\n    pass\n\n\ndef test_x():\n    make(use_cudnn=False)\n",
    "a module": "def test_x():\n    import nvidia_resiliency_ext\n",
    "a path": "def test_x():\n    open('/home/nvidia/no/such/config.yaml')\n",
    "the device idiom": (
        "import os\n\n\ndef build(device):\n    raise ValueError('bad hidden size 3')\n\n\n"
        "def test_x():\n    build(device='cuda' if os.environ.get('NO') else 'cpu')\n"
    ),
    "a handled CUDA error": (
        "def test_x():\n    try:\n        raise RuntimeError('CUDA error: no CUDA-capable device')\n"
        "    except RuntimeError:\n        {}['fallback']\n"
    ),
    "a body failure, then a teardown naming the driver": (
        "import pytest\n\n\n@pytest.fixture\ndef device():\n    yield 'cpu'\n"
        "    raise RuntimeError('Found no NVIDIA driver on your system')\n\n\n"
        "def test_x(device):\n    assert 2 + 2 == 5\n"
    ),
}
# What a test that needs a GPU says: not run, the apply passes.
GPU_NEEDS = {
    "an error": "def test_x():\n    raise RuntimeError('No CUDA GPUs are available')\n",
    "a skip": (
        "import pytest\n\npytestmark = pytest.mark.skip(reason='requires CUDA')\n\n\n"
        "def test_x():\n    pass\n"
    ),
    "the line that raised": (
        "import types\n\ntorch = types.SimpleNamespace(cuda=types.SimpleNamespace("
        "device_count=lambda: 0))\n\n\ndef test_x():\n"
        "    size = 8 // torch.cuda.device_count()\n"
    ),
}


def overlay_suite(rebaser, tmp_path, upstream, text: str):
    series = two_patch_series(tmp_path, upstream, overlay={"tests/test_case.py": text})
    report = tmp_path / "r.json"
    arguments = ["--series", series, "--repo", upstream.path, "--base", "v1", "--json", report]
    result = rebaser("apply", *arguments)
    (suite,) = json.loads(report.read_text())["suites"]
    return result, suite


@pytest.mark.parametrize("case", sorted(PLAIN_FAILURES))
def test_a_plain_failure_naming_a_gpu_word_fails_the_suite(rebaser, tmp_path, upstream, case):
    result, suite = overlay_suite(rebaser, tmp_path, upstream, PLAIN_FAILURES[case])
    (note,) = suite["tests"]
    assert note["verdict"] != "needs a GPU: not run", note
    assert suite["status"] == "failed" and suite["failed"] + suite["errors"] == 1, suite
    assert result.code == ExitCode.TESTS_FAILED, result.out


def test_the_tests_own_failure_decides_over_its_teardowns(rebaser, tmp_path, upstream):
    """pytest writes a test that fails and then errors in teardown twice: the teardown's
    entry replaced the failure's reason, and the test counted twice."""
    text = PLAIN_FAILURES["a body failure, then a teardown naming the driver"]
    _, suite = overlay_suite(rebaser, tmp_path, upstream, text)
    (note,) = suite["tests"]
    assert note["outcome"] == "failed" and "assert" in note["reason"], note


@pytest.mark.parametrize("case", sorted(GPU_NEEDS))
def test_a_test_that_needs_a_gpu_is_not_run(rebaser, tmp_path, upstream, case):
    result, suite = overlay_suite(rebaser, tmp_path, upstream, GPU_NEEDS[case])
    (note,) = suite["tests"]
    assert note["verdict"] == "needs a GPU: not run", note
    assert suite["status"] == "not run" and result.code == ExitCode.OK, (suite, result.out)
