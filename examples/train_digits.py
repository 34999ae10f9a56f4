"""Train a small CNN on scikit-learn's handwritten digits (8x8 images, 10 classes) with plygrad on the CPU.

    python3 examples/train_digits.py [--epochs 8] [--batch 32] [--lr 0.003] [--seed 0] [--no-jit]

The data set ships inside scikit-learn (`sklearn.datasets.load_digits`: 1797 images, no download). 20% of it, split
stratified with a fixed seed, is held out and never trained on; the script prints the loss and accuracy of every
epoch and the final held-out accuracy, and exits non-zero if that is below `--target` (97% by default).

The training step (forward, loss, backward, Adam update) is one function under `TinyJit`: the first calls schedule
and compile its kernels, later calls replay them on the next batch's buffers.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from plygrad.frontend import Tensor, TinyJit, nn
from plygrad.frontend.nn import optim
from plygrad.frontend.nn.state import get_parameters

Array = np.ndarray[Any, Any]


class DigitsCNN:
    """conv(1->16) relu conv(16->32) relu maxpool(2) -> 32x4x4 -> linear(512->10)."""

    def __init__(self) -> None:
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.bn1(self.conv1(x)).relu()
        x = self.bn2(self.conv2(x)).relu().max_pool2d(2)
        return self.fc(x.flatten(1))


def progress(done: int, total: int, started: float, extra: str) -> None:
    """One self-overwriting line: a bar, the step count, steps per second and `extra`."""
    width = 30
    filled = width * done // max(total, 1)
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stdout.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {rate:5.1f} it/s {extra}")
    sys.stdout.flush()
    if done == total:
        sys.stdout.write("\n")


def accuracy(model: DigitsCNN, images: Array, labels: Array, batch: int = 256) -> float:
    correct = 0
    with Tensor.train(False):
        for i in range(0, len(images), batch):
            logits = model(Tensor(images[i:i + batch]))
            correct += int((logits.argmax(axis=1).numpy() == labels[i:i + batch]).sum())
    return correct / len(images)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.97, help="fail (exit 1) below this held-out accuracy")
    parser.add_argument("--no-jit", action="store_true", help="run every step eagerly (slower)")
    args = parser.parse_args()

    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]  # (N, 1, 8, 8) in [0, 1]
    x_train, x_test, y_train, y_test = train_test_split(images, digits.target.astype(np.int32), test_size=0.2,
                                                        random_state=args.seed, stratify=digits.target)
    mean, std = float(x_train.mean()), float(x_train.std())
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    print(f"digits: {len(x_train)} training images, {len(x_test)} held out; 8x8, 10 classes")

    Tensor.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = DigitsCNN()
    params = get_parameters(model)
    opt = optim.Adam(params, lr=args.lr)
    print(f"model: {sum(p.numel() for p in params)} parameters; Adam lr={args.lr}, batch {args.batch}, "
          f"{args.epochs} epochs, {'eager' if args.no_jit else 'TinyJit'} steps")

    def train_step(x: Tensor, y: Tensor) -> Tensor:
        with Tensor.train():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
            return loss.realize()

    step = train_step if args.no_jit else TinyJit(train_step)
    steps = len(x_train) // args.batch  # whole batches only: a jitted step keeps one shape
    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        losses: list[float] = []
        epoch_start = time.perf_counter()
        for i in range(steps):
            idx = order[i * args.batch:(i + 1) * args.batch]
            loss = step(Tensor(x_train[idx]), Tensor(y_train[idx]))
            losses.append(float(loss.item()))
            progress(i + 1, steps, epoch_start, f"loss {losses[-1]:.4f}")
        train_acc, test_acc = accuracy(model, x_train, y_train), accuracy(model, x_test, y_test)
        mean_loss = sum(losses) / len(losses)
        if not math.isfinite(mean_loss):
            print(f"epoch {epoch}: the loss is {mean_loss}; stopping")
            return 1
        print(f"epoch {epoch:2d}: loss {mean_loss:.4f}  train accuracy {train_acc:.2%}  held-out accuracy "
              f"{test_acc:.2%}  ({time.perf_counter() - epoch_start:.1f} s)")
    final = accuracy(model, x_test, y_test)
    print(f"final held-out accuracy: {final:.2%} ({len(x_test)} images) after "
          f"{time.perf_counter() - started:.0f} s")
    if final < args.target:
        print(f"below the target of {args.target:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
