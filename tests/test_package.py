import re
import subprocess
import sys
from pathlib import Path

import sbdata

ROOT = Path(__file__).resolve().parent.parent


def test_all_is_sorted_and_importable():
    assert sbdata.__all__ == sorted(sbdata.__all__)
    for name in sbdata.__all__:
        assert hasattr(sbdata, name), name


def test_import_does_not_pull_optional_dependencies():
    frameworks = "('torchdata', 'webdataset', 'lightning', 'accelerate', 'transformers')"
    modules = "sbdata, sbdata.adapters, sbdata.integrations"
    code = f"import sys, {modules}; print(sorted(m for m in {frameworks} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_readme_python_blocks_run_in_order():
    blocks = readme_python_blocks()
    assert len(blocks) >= 4
    namespace: dict = {"__name__": "readme"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"README.md python block {i}", "exec"), namespace)
        except Exception as error:  # name the block that rotted
            raise AssertionError(f"README python block {i} failed: {error!r}\n{block}") from error
