"""The trainer examples run end to end, small, as documented (each under a hard timeout)."""

import re

import pytest

from tests.launch import ROOT, run_job

EXAMPLES = ROOT / "examples"


@pytest.mark.multiprocess
@pytest.mark.slow
def test_lightning_ddp_example_trains_on_two_processes():
    out = run_job(
        [str(EXAMPLES / "lightning_ddp.py"), "--devices", "2", "--epochs", "2", "--samples", "1536"], timeout=240
    )
    match = re.search(r"2 process\(es\), 2 epochs: validation accuracy (0\.\d{3}).*\((\d+)%\)", out)
    assert match, out[-2000:]
    assert float(match.group(1)) > 0.5 and 50 < int(match.group(2)) < 100  # learnt; selection ran after warm-up


@pytest.mark.multiprocess
@pytest.mark.slow
def test_hf_trainer_example_trains_a_tiny_gpt2():
    out = run_job([str(EXAMPLES / "hf_trainer.py"), "--samples", "512", "--epochs", "1"], timeout=240)
    assert re.search(r"step +\d+  loss \d\.\d{3}  backprop 0\.50", out), out[-2000:]
    assert "per-token loss: stride 1" in out


@pytest.mark.multiprocess
@pytest.mark.slow
def test_accelerate_example_resumes_exactly():
    out = run_job([str(EXAMPLES / "accelerate_loop.py"), "--samples", "1024", "--epochs", "2"], timeout=240)
    assert "the 8 remaining batches match" in out, out[-2000:]
