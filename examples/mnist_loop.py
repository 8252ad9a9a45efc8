"""The classic PyTorch MNIST example's loop, on MNIST-1D, taking Selective Backprop with one line.

    python examples/mnist_loop.py                                  # 14 epochs, about 30 s on a 2-core CPU
    python examples/mnist_loop.py --samples 2000 --epochs 1        # seconds (what the tests run)

Everything but two lines is written the way the public example (pytorch/examples, ``mnist/main.py``) writes it:
argparse, ``train(args, model, device, train_loader, optimizer, epoch)`` with its progress print, ``test()``,
Adadelta and a ``StepLR`` scheduler. The data is MNIST-1D, generated offline (``examples/common.py``), and the
model is a 1-D version of the example's ``Net``. The two sbdata lines are the import and, in ``main``::

    train_loader = SBLoader(train_loader, model, F.cross_entropy, keep=0.5)

The model returns log-probabilities and the loop trains on ``F.nll_loss``, as the public example does; the
cross-entropy of log-probabilities is their negative log-likelihood (``log_softmax`` of log-probabilities returns
them unchanged), so selection ranks the samples by the loop's own loss. Under selection ``len(data)`` is the kept
share of a batch (``ceil(keep * B)``), so the printed ``batch_idx * len(data)`` counts trained samples, while
``len(train_loader.dataset)`` and ``len(train_loader)`` are those of the wrapped loader.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

from sbdata import SBLoader

# examples/common.py, beside this script (a script's own directory is importable)
from common import load_mnist1d


class Net(nn.Module):
    """The public example's ``Net`` (two convolutions, max-pooling, dropout, two linear layers), in one dimension."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(1, 32, 3, 1)
        self.conv2 = nn.Conv1d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64 * 18, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool1d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(
    args: argparse.Namespace,
    model: nn.Module,
    device: torch.device,
    train_loader: DataLoader | SBLoader,
    optimizer: optim.Optimizer,
    epoch: int,
) -> None:
    """One epoch of training, printing progress every ``args.log_interval`` batches (the public example's)."""
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(
                "Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(  # noqa: UP032 (the public example's print)
                    epoch,
                    batch_idx * len(data),
                    len(train_loader.dataset),
                    100.0 * batch_idx / len(train_loader),
                    loss.item(),
                )
            )
            if args.dry_run:
                break


def test(model: nn.Module, device: torch.device, test_loader: DataLoader) -> None:
    """Average loss and accuracy on the test set (the public example's)."""
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)

    print(
        "\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(  # noqa: UP032
            test_loss, correct, len(test_loader.dataset), 100.0 * correct / len(test_loader.dataset)
        )
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the public example's arguments (plus ``--samples``), train and test each epoch."""
    parser = argparse.ArgumentParser(
        description="PyTorch MNIST-1D Example, with Selective Backprop (needs the examples extra, for MNIST-1D: "
        'pip install -e ".[examples]" from the clone\'s root)'
    )
    parser.add_argument(
        "--batch-size", type=int, default=64, metavar="N", help="input batch size for training (default: 64)"
    )
    parser.add_argument(
        "--test-batch-size", type=int, default=1000, metavar="N", help="input batch size for testing (default: 1000)"
    )
    parser.add_argument("--epochs", type=int, default=14, metavar="N", help="number of epochs to train (default: 14)")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR", help="learning rate (default: 1.0)")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M", help="Learning rate step gamma (default: 0.7)")
    parser.add_argument("--no-accel", action="store_true", help="disables accelerator")
    parser.add_argument("--dry-run", action="store_true", help="quickly check a single pass")
    parser.add_argument("--seed", type=int, default=1, metavar="S", help="random seed (default: 1)")
    parser.add_argument(
        "--log-interval",
        type=int,
        default=10,
        metavar="N",
        help="how many batches to wait before logging training status",
    )
    parser.add_argument(
        "--samples", type=int, default=10000, metavar="N", help="MNIST-1D samples, 80%% train (default: 10000)"
    )
    args = parser.parse_args(argv)

    use_accel = not args.no_accel and torch.cuda.is_available()

    torch.manual_seed(args.seed)

    device = torch.device("cuda") if use_accel else torch.device("cpu")

    train_kwargs = {"batch_size": args.batch_size}
    test_kwargs = {"batch_size": args.test_batch_size}
    if use_accel:
        accel_kwargs = {"num_workers": 1, "pin_memory": True, "shuffle": True}
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)
    else:
        train_kwargs.update({"shuffle": True})

    split = load_mnist1d(args.samples)  # in place of torchvision's datasets.MNIST: offline
    dataset1 = TensorDataset(split.x_train, split.y_train)
    dataset2 = TensorDataset(split.x_test, split.y_test)
    train_loader = DataLoader(dataset1, **train_kwargs)
    test_loader = DataLoader(dataset2, **test_kwargs)

    model = Net().to(device)
    train_loader = SBLoader(train_loader, model, F.cross_entropy, keep=0.5)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()


if __name__ == "__main__":
    main()
