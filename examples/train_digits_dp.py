"""Train examples/train_digits.py's CNN data-parallel: every rank holds the model and takes its share of each batch.

    python -m plygrad.distributed.run -n 2 examples/train_digits_dp.py [--epochs 3] [--batch 32] [--lr 0.003]

(Plain `python3 examples/train_digits_dp.py` is a world of one.) Every rank builds the same split of scikit-learn's
digits and draws the same batch order; rank r trains on its share of each batch, `DataParallel.sync_gradients()`
averages the gradients, so every rank takes the same Adam step. `sync_buffers()` averages BatchNorm's running
statistics before each evaluation. Rank 0 prints the loss and accuracy; at the end every rank's parameters are
compared across ranks (all_gather) and the script exits non-zero if they differ or the accuracy is below
`--target`. Steps run eagerly: the gradients leave the step through host memory to meet the other ranks.
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
from train_digits import DigitsCNN, accuracy, progress

from plygrad import distributed as dist
from plygrad.frontend import Tensor
from plygrad.frontend.nn import optim
from plygrad.frontend.nn.state import get_parameters

Array = np.ndarray[Any, Any]


def digits_split(seed: int) -> tuple[Array, Array, Array, Array]:
    """train_digits.py's data: 8x8 images scaled to [0, 1], a stratified 80/20 split, standardized by the training
    set's mean and deviation. Deterministic, so every rank builds the same one."""
    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]
    x_train, x_test, y_train, y_test = train_test_split(images, digits.target.astype(np.int32), test_size=0.2,
                                                        random_state=seed, stratify=digits.target)
    mean, std = float(x_train.mean()), float(x_train.std())
    return (x_train - mean) / std, (x_test - mean) / std, y_train, y_test


def identical_everywhere(params: list[Tensor]) -> bool:
    """Whether every rank holds the same parameters: each rank's values gathered and compared with rank 0's."""
    flat = Tensor(np.concatenate([p.numpy().ravel() for p in params]))
    gathered = dist.all_gather(flat).numpy()
    return bool((gathered == gathered[0]).all())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32, help="the global batch, split among the ranks")
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.95, help="fail (exit 1) below this held-out accuracy")
    args = parser.parse_args()

    rank, world = dist.rank(), dist.world_size()
    if args.batch % world:
        parser.error(f"--batch {args.batch} does not split evenly among {world} ranks")
    share = args.batch // world
    x_train, x_test, y_train, y_test = digits_split(args.seed)
    lead = rank == 0
    if lead:
        print(f"digits: {len(x_train)} training images, {len(x_test)} held out; {world} ranks, {share} images of "
              f"each batch of {args.batch} per rank")

    Tensor.manual_seed(args.seed + rank)  # different on purpose: DataParallel starts every rank from rank 0's
    model = DigitsCNN()
    dp = dist.DataParallel(model)
    params = get_parameters(model)
    opt = optim.Adam(params, lr=args.lr)
    rng = np.random.default_rng(args.seed)  # the same batch order on every rank
    steps = len(x_train) // args.batch
    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        losses: list[float] = []
        epoch_start = time.perf_counter()
        for i in range(steps):
            batch = order[i * args.batch:(i + 1) * args.batch]
            mine = batch[rank * share:(rank + 1) * share]
            with Tensor.train():
                opt.zero_grad()
                loss = model(Tensor(x_train[mine])).sparse_categorical_crossentropy(Tensor(y_train[mine]))
                loss.backward()
                dp.sync_gradients()
                opt.step()
            losses.append(float(loss.item()))
            if lead:
                progress(i + 1, steps, epoch_start, f"loss {losses[-1]:.4f}")
        dp.sync_buffers()
        mean_loss = float(dist.all_reduce(Tensor([sum(losses) / len(losses)]), "mean").item())
        if not math.isfinite(mean_loss):
            print(f"[rank {rank}] epoch {epoch}: the loss is {mean_loss}; stopping")
            return 1
        if lead:
            print(f"epoch {epoch:2d}: loss {mean_loss:.4f} (mean over ranks)  held-out accuracy "
                  f"{accuracy(model, x_test, y_test):.2%}  ({time.perf_counter() - epoch_start:.1f} s)")
    same = identical_everywhere(params)
    if not lead:
        return 0 if same else 1
    final = accuracy(model, x_test, y_test)
    print(f"final held-out accuracy: {final:.2%} ({len(x_test)} images) after {time.perf_counter() - started:.0f} s; "
          f"parameters {'identical' if same else 'DIFFERENT'} on all {world} ranks")
    if not same:
        return 1
    if final < args.target:
        print(f"below the target of {args.target:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
