"""The user guide's blocks for the stacks that are not sbdata's extras (mosaicml-streaming, Hugging Face datasets,
Ray Train, in docs/guide/distributed.md): each runs, in a fresh interpreter, where its package is installed, and is
skipped with the install line where it is not (CI installs none of them)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "distributed.md"
NEEDS = re.compile(r"\A# needs: (\w+) \((pip install .+)\)\n")


def stack_blocks() -> list[tuple[str, str, str]]:
    """Each ```py block of the page: the module it needs, the install that brings it, the code."""
    blocks = re.findall(r"```py\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    found = []
    for block in blocks:
        named = NEEDS.match(block)
        assert named, f"a stack block does not open with '# needs: module (pip install ...)':\n{block}"
        found.append((named.group(1), named.group(2), block))
    return found


def test_the_page_has_a_block_for_each_stack():
    assert [module for module, _, _ in stack_blocks()] == ["streaming", "datasets", "ray"]


@pytest.mark.slow
@pytest.mark.parametrize(("module", "install", "block"), stack_blocks(), ids=lambda value: str(value)[:12])
def test_each_stack_block_runs_where_its_package_is_installed(module, install, block, tmp_path):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed here ({install}); CI does not install it")
    run = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
