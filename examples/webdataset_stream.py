"""Selective Backprop on a WebDataset stream: MNIST-1D tar shards, two loader workers, selection in the main process.

The script writes MNIST-1D's training set to tar shards with ``wds.ShardWriter`` (``__key__``, ``.npy``,
``.cls``), streams them with a ``WebLoader`` whose two workers read and decode, re-batches in the main process
and trains through ``sb_select``. It then prints the keys selected most often: the hard examples a user would
inspect. Decoding reads only ``.npy`` (``allow_pickle=False``) and ``.cls``; WebDataset's own decoders, which
include pickle for ``.pyd``/``.pkl`` files, are never enabled.

Needs the ``webdataset`` and ``examples`` extras (``pip install -e ".[webdataset,examples]"`` from the clone's
root). Run from the clone's root::

    python examples/webdataset_stream.py                          # 4000 samples, 4 epochs, about 10 s on a 2-core CPU
    python examples/webdataset_stream.py --samples 1000 --epochs 2    # what the tests run
    python examples/webdataset_stream.py --shards "/data/train-{000000..000099}.tar"  # your shards
"""

from __future__ import annotations

import argparse
import collections
import io
import math
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from sbdata.wds import sb_select

try:
    import webdataset as wds
except ImportError as error:  # --help works without the extra; running names it
    MISSING: ImportError | None = error
else:
    MISSING = None

# examples/common.py, beside this script (a script's own directory is importable)
from common import MLP, accuracy, load_mnist1d


def write_shards(x: np.ndarray, y: np.ndarray, root: Path, shards: int) -> list[str]:
    """One tar member per field: ``.npy`` written by numpy without pickle, ``.cls`` the label as text."""
    with wds.ShardWriter(str(root / "mnist1d-%04d.tar"), maxcount=math.ceil(len(y) / shards), verbose=0) as sink:
        for i in range(len(y)):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, x[i], allow_pickle=False)
            sink.write({"__key__": f"mnist1d-{i:06d}", "npy": buffer.getvalue(), "cls": str(int(y[i])).encode()})
    return sorted(str(path) for path in root.glob("mnist1d-*.tar"))


def decode(sample: dict) -> tuple[np.ndarray, int, str]:
    """Decode only what training needs: ``.npy`` without pickle, ``.cls`` as an int; everything else is dropped."""
    x = np.lib.format.read_array(io.BytesIO(sample["npy"]), allow_pickle=False)
    return x, int(sample["cls"]), sample["__key__"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=5000, help="MNIST-1D samples (80%% train). Default 5000.")
    parser.add_argument("--epochs", type=int, default=4, help="Passes over the shards. Default 4.")
    parser.add_argument("--shards", default=None, help="Your shards (brace pattern); default writes MNIST-1D.")
    parser.add_argument("--num-shards", type=int, default=4, help="Shards to write. Default 4.")
    parser.add_argument("--workers", type=int, default=2, help="WebLoader workers. Default 2.")
    parser.add_argument("--batch-size", type=int, default=64, help="Batch size seen by sb_select. Default 64.")
    parser.add_argument("--keep", type=float, default=0.5, help="Share of each batch trained on. Default 0.5.")
    parser.add_argument("--top", type=int, default=10, help="Most-selected keys to print. Default 10.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if MISSING is not None:
        raise SystemExit(
            f'{MISSING}: this example needs the webdataset and examples extras: pip install -e ".[webdataset,examples]"'
        )
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    split = load_mnist1d(args.samples)

    with tempfile.TemporaryDirectory() as tmp:
        urls = args.shards or write_shards(split.x_train.numpy(), split.y_train.numpy(), Path(tmp), args.num_shards)
        model = MLP(hidden=128)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        stage = sb_select(model, F.cross_entropy, keep=args.keep, generator=args.seed)
        # The workers read, decode and pre-batch whole shards (split_by_worker); the main process mixes samples
        # from all workers, re-batches, and selects there: stage last, after the loader.
        dataset = wds.WebDataset(urls, shardshuffle=100, seed=args.seed).map(decode).batched(32)
        loader = (
            wds.WebLoader(dataset, batch_size=None, num_workers=args.workers)
            .unbatched()
            .shuffle(1000)
            .batched(args.batch_size)
            .compose(stage)
        )
        selected: collections.Counter[str] = collections.Counter()
        labels: dict[str, int] = {}
        for _ in range(args.epochs):
            for x, y, keys in loader:  # the WebLoader turned arrays into tensors; keys stay strings
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                selected.update(keys)
                labels.update(zip(keys, y.tolist(), strict=True))

    stats = stage.stats
    test_accuracy = accuracy(model, split.x_test, split.y_test)
    print(f"trained {args.epochs} epochs on the stream: test accuracy {test_accuracy:.3f}")
    print(
        f"  {stats.samples_seen} samples streamed, backprop on {stats.samples_yielded} "
        f"({stats.backprop_fraction:.0%}); mean loss kept {stats.mean_loss_kept:.3f} vs dropped "
        f"{stats.mean_loss_dropped:.3f}"
    )
    always = sum(count == args.epochs for count in selected.values())
    print(f"{always} of {len(labels)} keys were selected in all {args.epochs} passes; the hard examples to inspect:")
    for key, count in selected.most_common(args.top):
        print(f"  {key}  label {labels[key]}  selected {count}x")


if __name__ == "__main__":
    main()
