"""The domains: one contract every domain meets, and Fashion-MNIST's files read from small IDX files this test writes
(CI installs no dataset)."""

import gzip
import struct

import numpy as np
import pytest
import torch

from benchmarks.domains import domain, names
from benchmarks.domains import fashion_mnist as fm
from benchmarks.lab.batches import Batches
from benchmarks.lab.domain import Domain


def write_idx(path, array, gz=False):
    codes = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C, np.dtype(">f4"): 0x0D}
    header = struct.pack(">BBBB", 0, 0, codes[array.dtype], array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape
    )
    (gzip.open if gz else open)(path, "wb").write(header + array.tobytes())


def fashion_files(folder, train=300, test=100, gz=True):
    """Four IDX files of random images whose label is planted in the top-left pixel's brightness (learnable)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", train), ("t10k", test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
        images[:, :4, :4] = (labels * 25)[:, None, None]
        suffix = ".gz" if gz else ""
        write_idx(folder / f"{split}-images-idx3-ubyte{suffix}", images, gz)
        write_idx(folder / f"{split}-labels-idx1-ubyte{suffix}", labels, gz)
    return folder


@pytest.mark.parametrize("gz", [True, False])
def test_idx_files_read_back_their_shape_type_and_values(tmp_path, gz):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("x.idx.gz" if gz else "x.idx")
    write_idx(path, images, gz)
    assert np.array_equal(fm.read_idx(path), images) and fm.read_idx(path).dtype == np.uint8
    floats = np.array([[1.5, -2.0]], dtype=">f4")
    write_idx(tmp_path / "f.idx", floats)
    assert np.array_equal(fm.read_idx(tmp_path / "f.idx"), floats)


def test_a_file_that_is_not_idx_or_is_cut_short_is_named(tmp_path):
    (tmp_path / "bad").write_bytes(b"PK\x03\x04rest")
    with pytest.raises(ValueError, match="bad is not an IDX file"):
        fm.read_idx(tmp_path / "bad")
    write_idx(tmp_path / "short", np.zeros((4, 2), dtype=np.uint8))
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-3])
    with pytest.raises(ValueError, match=r"shape \(4, 2\) but it holds 5 values"):
        fm.read_idx(tmp_path / "short")


def test_the_files_are_found_by_argument_then_environment(tmp_path, monkeypatch):
    given, env = fashion_files(tmp_path / "given"), fashion_files(tmp_path / "env", gz=False)
    monkeypatch.setenv(fm.ENV, str(env))
    assert fm.locate(given) == given  # --data first
    assert fm.locate(None) == env
    arrays = fm.load(env)
    assert arrays["x_train"].shape == (300, 28, 28) and arrays["x_train"].dtype == torch.uint8
    assert arrays["y_test"].dtype == torch.int64 and len(arrays["y_test"]) == 100


def test_missing_files_stop_the_run_naming_the_three_ways(tmp_path, monkeypatch):
    monkeypatch.delenv(fm.ENV, raising=False)
    monkeypatch.setattr(fm, "DEBIAN", tmp_path / "no-debian")
    monkeypatch.setattr(fm, "TORCHVISION", tmp_path / "no-torchvision")
    (tmp_path / "partial").mkdir()
    write_idx(tmp_path / "partial" / "train-images-idx3-ubyte", np.zeros((1, 28, 28), dtype=np.uint8))
    with pytest.raises(SystemExit) as stop:
        fm.locate(tmp_path / "partial")
    message = str(stop.value)
    assert "--data DIR" in message and fm.ENV in message and "apt-get install dataset-fashion-mnist" in message
    assert "FashionMNIST(root=" in message and "partial" in message
    with pytest.raises(SystemExit, match="no-debian.*no-torchvision"):
        fm.locate(None)


def test_fashion_data_normalises_with_the_training_draws_statistics(tmp_path):
    data = fm.DOMAIN.data(smoke=False, root=fashion_files(tmp_path / "f"), samples=200)
    x, y = data.train
    assert x.shape == (200, 1, 28, 28) and y.shape == (200,)
    assert x.mean().item() == pytest.approx(0.0, abs=1e-4) and x.std().item() == pytest.approx(1.0, abs=1e-3)
    assert data.tests["mix"][0].shape == (100, 1, 28, 28)
    again = fm.DOMAIN.data(smoke=False, root=tmp_path / "f", samples=200)
    assert torch.equal(again.train[1], y)  # a fixed draw


@pytest.mark.parametrize("name", names())
def test_every_domain_meets_the_contract(name, tmp_path):
    dom = domain(name)
    assert isinstance(dom, Domain) and dom.name == name and dom.kind in ("synthetic", "real")
    root = fashion_files(tmp_path / "f") if name == "fashion_mnist" else None
    data = dom.data(smoke=True, root=root)
    for family in dom.families:
        recipe = dom.recipes[family]
        assert recipe["batch"] > 0 and recipe["lr"] > 0
    batches = Batches(dom, data.train, 8, seed=0)
    batch = next(iter(batches))
    model = dom.tiny()
    losses = dom.loss(model, batch)
    assert losses.shape == (8,) and bool(torch.isfinite(losses).all())
    assert dom.loss(model, batch, reduction="mean").shape == ()
    metrics = dom.evaluate(model, data)
    assert f"{dom.metric.prefix}_mix" in metrics
    options = dom.sb_options()
    assert "loss_fn" in options and "split" in options


def test_unknown_domain_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown domain 'imagenet'.*fashion_mnist"):
        domain("imagenet")
