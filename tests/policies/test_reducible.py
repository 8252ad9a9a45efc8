import pytest
import torch

from sbdata import ReducibleSelect, SBLoader, SelectionEngine
from tests.helpers import OracleModel, ce, ids_of, oracle_batch

# Ids 0 and 1 are label noise: the highest training losses, but just as high under the irreducible model.
TRAIN = [3.0, 2.9, 2.0, 1.5, 0.2, 0.3, 0.25, 0.4]
IRREDUCIBLE = [2.9, 2.8, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]  # reducible: 0.1 0.1 1.9 1.4 0.1 0.2 0.15 0.3


def dict_batch(ids):
    x, y = oracle_batch(ids)
    return {"input": x, "target": y, "index": torch.tensor(ids), "__key__": [f"s{i}" for i in ids]}


def test_plain_topk_chases_the_noise_and_reducible_loss_does_not():
    (plain,) = list(SBLoader([dict_batch(range(8))], OracleModel(TRAIN), ce, keep=0.25))
    assert ids_of(plain) == [0, 1]
    policy = ReducibleSelect(OracleModel(IRREDUCIBLE))
    (rho,) = list(SBLoader([dict_batch(range(8))], OracleModel(TRAIN), ce, keep=0.25, policy=policy))
    assert ids_of(rho) == [2, 3]
    assert rho["__key__"] == ["s2", "s3"] and rho["index"].tolist() == [2, 3]


def test_irreducible_model_is_scored_in_the_same_pass_without_side_effects():
    irreducible = OracleModel(IRREDUCIBLE).train()
    list(SBLoader([dict_batch(range(8))], OracleModel(TRAIN), ce, keep=0.25, policy=ReducibleSelect(irreducible)))
    assert irreducible.calls == [8] and irreducible.training and irreducible.scale.grad is None


@pytest.mark.parametrize(
    ("table", "id_key"),
    [
        ({f"s{i}": v for i, v in enumerate(IRREDUCIBLE)}, "__key__"),
        (torch.tensor(IRREDUCIBLE), "index"),
        ({i: v for i, v in enumerate(IRREDUCIBLE)}, "index"),
    ],
)
def test_precomputed_tables_select_like_the_model(table, id_key):
    policy = ReducibleSelect(table)
    (out,) = list(SBLoader([dict_batch(range(8))], OracleModel(TRAIN), ce, keep=0.25, policy=policy, id_key=id_key))
    assert ids_of(out) == [2, 3]


def test_missing_key_names_it():
    table = {f"s{i}": v for i, v in enumerate(IRREDUCIBLE) if i != 5}
    sb = SBLoader([dict_batch(range(8))], OracleModel(TRAIN), ce, policy=ReducibleSelect(table), id_key="__key__")
    with pytest.raises(ValueError, match="no irreducible loss for id 's5'"):
        list(sb)


def test_dense_table_out_of_range_names_the_ids():
    sb = SBLoader([dict_batch([0, 9])], OracleModel([*TRAIN, 0.0, 1.0]), ce, policy=ReducibleSelect(torch.zeros(8)),
                  id_key="index")  # fmt: skip
    with pytest.raises(ValueError, match=r"no irreducible loss for ids \[9\].*0..7"):
        list(sb)


def test_sampling_base_policy_gives_weights():
    policy = ReducibleSelect(OracleModel(IRREDUCIBLE), policy="rank")
    engine = SelectionEngine(OracleModel(TRAIN), ce, keep=0.5, policy=policy, return_weights=True)
    _subset, weights = engine.process(dict_batch(range(8)))
    assert weights.shape == (4,) and bool((weights > 0).all())


@pytest.mark.parametrize(
    ("make", "kwargs", "error", "fragment"),
    [
        (lambda: ReducibleSelect([0.1, 0.2]), {}, TypeError, "irreducible must be an nn.Module"),
        (lambda: ReducibleSelect(torch.zeros(2, 2)), {}, ValueError, "must be 1-D"),
        (lambda: ReducibleSelect(torch.zeros(2), policy=ReducibleSelect(torch.zeros(2))), {}, ValueError,
         "cannot wrap another"),
        (lambda: ReducibleSelect({"a": 1.0}), {}, ValueError, "needs id_key="),
        (lambda: ReducibleSelect(OracleModel(IRREDUCIBLE).to("meta")), {}, ValueError, "irreducible model is on meta"),
        (lambda: ReducibleSelect(torch.zeros(8)), {"return_weights": True, "id_key": "index"}, ValueError,
         "deterministic"),
    ],
)  # fmt: skip
def test_misuse_errors(make, kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        SelectionEngine(OracleModel(TRAIN), ce, policy=make(), **kwargs)


def test_key_table_through_the_webdataset_stage(tmp_path):
    import webdataset as wds

    from sbdata.wds import sb_select
    from tests.helpers import decode_npy_cls, write_oracle_shards

    shards = write_oracle_shards(tmp_path, 8, shards=2)
    table = {f"s{i:04d}": loss for i, loss in enumerate(IRREDUCIBLE)}
    stage = sb_select(
        OracleModel(TRAIN), ce, keep=0.25, policy=ReducibleSelect(table), id_key="__key__",
        split=lambda b: (b["npy"], b["cls"]),
    )  # fmt: skip
    pipeline = wds.DataPipeline(
        wds.SimpleShardList(shards), wds.tarfile_to_samples(), wds.map(decode_npy_cls), wds.batched(8), stage
    )
    (out,) = list(pipeline)
    assert out["__key__"] == ["s0002", "s0003"]  # the noisy s0000/s0001 are not preferred
    assert ids_of((out["npy"],)) == [2, 3]
