"""Train examples/train_digits.py's CNN data-parallel over several devices of ONE process (CPU:0..3 by default).

    python3 examples/train_digits_multi.py [--devices 4] [--epochs 3] [--batch 32] [--lr 0.003]

`replicate` puts a copy of every parameter and BatchNorm statistic on each device; each batch is split along axis
0 (`Tensor.shard`), the nn layers run unchanged on it, BatchNorm's statistics are the whole batch's (synced), and
the gradient of each parameter is summed over the devices by ALLREDUCEs in the graph. One Adam per device steps
its copies, so every copy takes the same step; the step is a TinyJit (captured on the second batch, replayed
after). At the end the copies are compared; the script exits non-zero if
they differ or the held-out accuracy is below `--target`. The MPI sibling is train_digits_dp.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
from train_digits import DigitsCNN, progress
from train_digits_dp import digits_split

from plygrad.frontend import Tensor
from plygrad.frontend.jit import TinyJit
from plygrad.frontend.multi import MultiTensor
from plygrad.frontend.nn import optim
from plygrad.frontend.nn.optim import OptimizerGroup
from plygrad.frontend.replicas import per_device, replicate

Array = np.ndarray[Any, Any]


def accuracy(model: DigitsCNN, images: Array, labels: Array, devices: tuple[str, ...], batch: int = 128) -> float:
    """Held-out accuracy, each evaluation batch split over the devices like the training batches."""
    correct = 0
    with Tensor.train(False):
        for i in range(0, len(images) - len(images) % len(devices), batch):
            rows = slice(i, min(i + batch, len(images) - len(images) % len(devices)))
            logits: Any = model(Tensor(images[rows]).shard(devices, 0))  # type: ignore[arg-type]
            correct += int((logits.argmax(axis=1).numpy() == labels[rows]).sum())
    return correct / (len(images) - len(images) % len(devices))


def identical_copies(params: list[MultiTensor]) -> bool:
    return all(np.array_equal(s.numpy(), p.shards[0].numpy()) for p in params for s in p.shards)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=4, help="how many CPU devices (CPU:0..n-1)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32, help="the global batch, split among the devices")
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0, help="stop each epoch after this many steps (0: all)")
    parser.add_argument("--target", type=float, default=0.95, help="fail (exit 1) below this held-out accuracy")
    args = parser.parse_args()
    devices = tuple(f"CPU:{i}" for i in range(args.devices))
    if args.batch % args.devices:
        parser.error(f"--batch {args.batch} does not split evenly among {args.devices} devices")
    x_train, x_test, y_train, y_test = digits_split(args.seed)
    print(f"digits: {len(x_train)} training images, {len(x_test)} held out; batches of {args.batch} split over "
          f"{', '.join(devices)}")

    Tensor.manual_seed(args.seed)
    model = DigitsCNN()
    params = replicate(model, devices)
    trained = [p for p in params if p.requires_grad]
    opt = OptimizerGroup(*(optim.Adam(group, lr=args.lr) for group in per_device(params)))
    rng = np.random.default_rng(args.seed)

    @TinyJit
    def train_step(x: MultiTensor, y: MultiTensor) -> MultiTensor:
        with Tensor.train():
            opt.zero_grad()
            loss: Any = model(x).sparse_categorical_crossentropy(y)  # type: ignore[arg-type]
            loss.backward()
            opt.step()
        return loss.realize()  # type: ignore[no-any-return]

    steps = len(x_train) // args.batch if not args.steps else min(args.steps, len(x_train) // args.batch)
    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        losses: list[float] = []
        epoch_start = time.perf_counter()
        for i in range(steps):
            batch = order[i * args.batch:(i + 1) * args.batch]
            x = Tensor(x_train[batch]).shard(devices, 0).realize()
            loss = train_step(x, Tensor(y_train[batch]).shard(devices, 0).realize())
            losses.append(float(loss.item()))
            progress(i + 1, steps, epoch_start, f"loss {losses[-1]:.4f}")
        print(f"epoch {epoch:2d}: loss {sum(losses) / len(losses):.4f}  held-out accuracy "
              f"{accuracy(model, x_test, y_test, devices):.2%}  ({time.perf_counter() - epoch_start:.1f} s)")
    same = identical_copies(trained)
    final = accuracy(model, x_test, y_test, devices)
    print(f"final held-out accuracy: {final:.2%} after {time.perf_counter() - started:.0f} s; parameters "
          f"{'identical' if same else 'DIFFERENT'} on all {len(devices)} devices")
    if not same:
        return 1
    if final < args.target:
        print(f"below the target of {args.target:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
