"""The execution paths compute the same thing: eager and --compile give the same first losses on CPU, for every
test run of scripts/registry.py (tests/test_gpu.py compares all four paths on a GPU)."""

import pytest
import torch

from scripts.registry import CPU_TEST_RUNS, TEST_RUNS
from tests.helpers import first_losses


@pytest.mark.parametrize("case", list(CPU_TEST_RUNS))
def test_eager_and_compile_give_the_same_first_losses(tmp_path, case):
    eager = first_losses(case, str(tmp_path / "eager"), "--no-cuda")
    compiled = first_losses(case, str(tmp_path / "compile"), "--no-cuda", "--compile")
    assert any(value != 0 for value in eager)
    tolerance = {"rtol": 2e-2, "atol": 1e-3} if TEST_RUNS[case].loose else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(compiled, eager, **tolerance)
