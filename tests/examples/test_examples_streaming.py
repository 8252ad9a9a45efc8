"""Both streaming examples run end to end, small, as a user would run them."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the examples end to end

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize("name", ["torchdata_nodes.py", "webdataset_stream.py"])
def test_example_trains_with_selection(name):
    out = run_example(name, "--samples", "1000", "--epochs", "2")
    assert re.search(r"trained 2 epochs.*test accuracy 0\.\d{3}", out)
    fraction = int(re.search(r"\((\d+)%\)", out).group(1))
    assert 40 <= fraction < 100  # selection ran: fewer samples were backpropagated than were seen
    if name == "torchdata_nodes.py":
        assert "the final weights match the uninterrupted run exactly" in out
    else:
        keys = re.findall(r"^  (mnist1d-\d{6})  label \d  selected (\d)x$", out, flags=re.MULTILINE)
        assert len(keys) == 10 and all(int(count) <= 2 for _, count in keys)
