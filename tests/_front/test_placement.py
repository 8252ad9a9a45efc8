import threading

import pytest
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBCollator
from sbdata._front import check_not_in_worker, check_thread
from tests.helpers import OracleModel, ce, oracle_batch


def test_collator_in_a_worker_process_raises_naming_the_fix():
    collate = SBCollator(OracleModel([1.0] * 8), ce)
    batches = iter(DataLoader(TensorDataset(*oracle_batch(range(8))), batch_size=4, num_workers=1, collate_fn=collate))
    with pytest.raises(RuntimeError, match=r"SBCollator ran in DataLoader worker process 0.*use num_workers=0"):
        next(batches)
    with pytest.raises(RuntimeError):  # read to the end, so the worker exits now rather than at a 5 s join timeout
        next(batches)
    assert next(batches, None) is None


def test_guards_pass_where_the_model_lives():
    check_not_in_worker("stage", "fix")
    check_thread(threading.get_ident(), "stage", "fix")


def test_thread_guard_names_stage_reason_and_fix():
    errors = []

    def other() -> None:
        try:
            check_thread(threading.main_thread().ident, "my stage", "Do this.")
        except RuntimeError as error:
            errors.append(str(error))

    worker = threading.Thread(target=other, name="prefetch")
    worker.start()
    worker.join()
    assert len(errors) == 1
    assert errors[0].startswith("my stage was iterated from thread 'prefetch'")
    assert "optimizer.step() updates them in place. Do this." in errors[0]
