"""Same seed, same path, CPU: identical metrics, for every test run of scripts/registry.py."""

import pytest

from scripts.registry import CPU_TEST_RUNS, TEST_RUNS
from tests.helpers import metrics_after, run_script


@pytest.mark.parametrize("case", list(CPU_TEST_RUNS))
def test_same_seed_same_metrics(tmp_path, case):
    test_run = TEST_RUNS[case]
    runs = []
    for attempt in ("a", "b"):
        result = run_script(test_run.script, *test_run.flags, "--no-cuda", "--runs-dir", str(tmp_path / attempt))
        assert result.returncode == 0, result.stderr[-2000:]
        runs.append(metrics_after(str(tmp_path / attempt), -1))
    assert len(runs[0]) > 5 and any(name.endswith("loss") for _, name, _ in runs[0])
    assert runs[0] == runs[1]
