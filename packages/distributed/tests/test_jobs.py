"""Jobs of 2 and 4 ranks over MPI, launched with `python -m plygrad.distributed.run`: collectives against NumPy,
DataParallel against one process, and fail-stop (an exception, a sleeping rank, a killed rank, a mismatch)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from plygrad.distributed import run

# one job runs every case; each rank writes {case: values} to a file (Job.outputs)
COLLECTIVES_JOB = """
    import json
    import numpy as np
    from plygrad import distributed as dist
    from plygrad.frontend import Tensor

    def values(rank, dtype):
        rng = np.random.default_rng(100 + rank)
        return (rng.standard_normal((3, 5)) * 8).astype(dtype)

    rank = dist.rank()
    results = {"world": dist.world_size()}
    for dtype in ("float32", "float16", "int32"):
        for op in ("sum", "max", "min", "mean"):
            if op == "mean" and dtype == "int32":
                continue
            out = dist.all_reduce(Tensor(values(rank, dtype)), op)
            assert str(out.numpy().dtype) == dtype, out.dtype
            results[f"{op} {dtype}"] = out.numpy().astype(np.float64).tolist()
    t = Tensor(values(rank, "float32"))
    dist.all_reduce_(t, "sum")
    results["sum_ float32"] = t.numpy().astype(np.float64).tolist()
    results["broadcast"] = dist.broadcast(Tensor(values(rank, "float32")), src=1).numpy().tolist()
    results["all_gather"] = dist.all_gather(Tensor(values(rank, "int32"))).numpy().tolist()
    results["scalar"] = dist.all_reduce(Tensor(float(rank + 1))).numpy().tolist()
    results["empty"] = list(dist.all_gather(dist.all_reduce(Tensor.zeros(0, 3))).shape)
    dist.barrier()
    with open(f"{__file__}.{rank}.json", "w") as f:
        json.dump({"rank": rank, **results}, f)
"""


def _values(rank: int, dtype: str) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(100 + rank)
    return (rng.standard_normal((3, 5)) * 8).astype(dtype)


def _expected(case: str, world: int) -> tuple[np.ndarray[Any, Any], float]:
    """NumPy's answer for `case` over `world` ranks' inputs, and the tolerance for it."""
    if case == "broadcast":
        return _values(1, "float32"), 0.0
    if case == "scalar":
        return np.array(world * (world + 1) / 2), 0.0
    if case == "empty":
        return np.array([world, 0, 3]), 0.0
    if case == "all_gather":
        return np.stack([_values(r, "int32") for r in range(world)]), 0.0
    op, dtype = case.split(" ")
    stacked = np.stack([_values(r, dtype) for r in range(world)])
    reduce = {"sum": np.sum, "sum_": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[op]
    exact = reduce(stacked.astype(np.float64), axis=0).astype(dtype)  # one rounding to the dtype
    return exact, (1e-3 if dtype == "float16" else 1e-6)


CASES = [f"{op} {dtype}" for dtype in ("float32", "float16", "int32") for op in ("sum", "max", "min", "mean")
         if not (op == "mean" and dtype == "int32")] + ["sum_ float32", "broadcast", "all_gather", "scalar", "empty"]


def _results(job: Any, n: int) -> list[dict[str, Any]]:
    assert job.returncode == 0, job.stdout + job.stderr
    found = job.outputs()
    assert [r["rank"] for r in found] == list(range(n)), job.stdout
    return found


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory, launch: Callable[..., Any]) -> list[dict[str, Any]]:
    return _results(launch(tmp_path_factory.mktemp("collectives"), COLLECTIVES_JOB, 2), 2)


@pytest.mark.parametrize("case", CASES)
def test_a_collective_on_two_ranks_equals_numpy(two_ranks: list[dict[str, Any]], case: str) -> None:
    expected, tolerance = _expected(case, 2)
    for result in two_ranks:
        assert result["world"] == 2
        np.testing.assert_allclose(np.array(result[case]), expected.astype(np.float64), rtol=tolerance,
                                   atol=tolerance, err_msg=f"{case} on rank {result['rank']}")


def test_collectives_on_four_ranks_equal_numpy(tmp_path: Path, launch: Callable[..., Any]) -> None:
    for result in _results(launch(tmp_path, COLLECTIVES_JOB, 4), 4):
        for case in ("sum float32", "max int32", "mean float16", "all_gather"):
            expected, tolerance = _expected(case, 4)
            np.testing.assert_allclose(np.array(result[case]), expected.astype(np.float64), rtol=tolerance,
                                       atol=tolerance, err_msg=f"{case} on rank {result['rank']}")


# rank r starts from its own random parameters (DataParallel must replace them by rank 0's), takes its half of one
# batch, and prints the parameters after one SGD step; a world of one takes the whole batch
TRAIN_STEP_JOB = """
    import json
    import numpy as np
    from plygrad import distributed as dist
    from plygrad.frontend import Tensor
    from plygrad.frontend.nn import Linear, optim
    from plygrad.frontend.nn.state import get_parameters

    class MLP:
        def __init__(self):
            self.l1, self.l2 = Linear(6, 16), Linear(16, 3)

        def __call__(self, x):
            return self.l2(self.l1(x).tanh())

    rank, world = dist.rank(), dist.world_size()
    Tensor.manual_seed(rank)
    model = MLP()
    dp = dist.DataParallel(model)
    opt = optim.SGD(get_parameters(model), lr=0.5)
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32)
    share = len(x) // world
    mine = slice(rank * share, (rank + 1) * share)
    with Tensor.train():
        opt.zero_grad()
        model(Tensor(x[mine])).sparse_categorical_crossentropy(Tensor(y[mine])).backward()
        dp.sync_gradients()
        opt.step()
    with open(f"{__file__}.{rank}.json", "w") as f:
        json.dump({"rank": rank, "params": [p.numpy().tolist() for p in get_parameters(model)]}, f)
"""


def test_a_data_parallel_step_on_two_ranks_equals_one_process_on_the_whole_batch(
        tmp_path: Path, launch: Callable[..., Any], run_alone: Callable[..., Any]) -> None:
    alone = run_alone(tmp_path, TRAIN_STEP_JOB)
    assert alone.returncode == 0, alone.stderr
    (reference,) = [r["params"] for r in alone.outputs()]
    job = launch(tmp_path, TRAIN_STEP_JOB, 2)
    assert job.returncode == 0, job.stdout + job.stderr
    ranks = job.outputs()
    assert [r["rank"] for r in ranks] == [0, 1]
    for result in ranks:
        for got, want in zip(result["params"], reference, strict=True):
            np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)


def test_an_exception_on_one_rank_ends_the_job_with_its_traceback(tmp_path: Path,
                                                                  launch: Callable[..., Any]) -> None:
    job = launch(tmp_path, """
        from plygrad import distributed as dist
        from plygrad.frontend import Tensor
        dist.barrier()
        if dist.rank() == 1:
            raise ValueError("rank 1 fails on purpose")
        while True:  # rank 0 would wait for rank 1 until the 60 s deadline
            dist.all_reduce(Tensor([1.0]))
    """, 2, env={"PLYGRAD_DIST_TIMEOUT": "60"}, limit=60)
    assert job.seconds < 30
    assert job.returncode != 0
    assert "[rank 1] ValueError: rank 1 fails on purpose" in job.stderr
    assert re.search(r"\[rank 1\] +raise ValueError", job.stderr), job.stderr


def test_a_sleeping_rank_makes_the_others_time_out_naming_the_op(tmp_path: Path,
                                                                 launch: Callable[..., Any]) -> None:
    job = launch(tmp_path, """
        import time
        from plygrad import distributed as dist
        from plygrad.frontend import Tensor
        dist.barrier()                      # collective #1
        if dist.rank() == 1:
            time.sleep(40)
        dist.all_reduce(Tensor([1.0]))      # collective #2: rank 0 gives up after 3 s
    """, 2, env={"PLYGRAD_DIST_TIMEOUT": "3"}, limit=60)
    assert job.returncode != 0
    assert job.seconds < 30
    assert re.search(r"\[rank 0\] plygrad\.distributed\.errors\.DistributedError: all_reduce.* #2 on rank 0: the "
                     r"other ranks did not take part within PLYGRAD_DIST_TIMEOUT=3 s", job.stderr), job.stderr


def test_a_killed_rank_ends_the_job(tmp_path: Path, launch: Callable[..., Any]) -> None:
    job = launch(tmp_path, """
        import os, signal
        from plygrad import distributed as dist
        from plygrad.frontend import Tensor
        dist.barrier()
        if dist.rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        while True:
            dist.all_reduce(Tensor([1.0]))
    """, 2, env={"PLYGRAD_DIST_TIMEOUT": "60"}, limit=60)
    assert job.returncode != 0
    assert job.seconds < 30


def test_a_shape_mismatch_is_a_clear_error_on_every_rank(tmp_path: Path, launch: Callable[..., Any]) -> None:
    job = launch(tmp_path, """
        import json
        from plygrad import distributed as dist
        from plygrad.frontend import Tensor
        rank = dist.rank()
        try:
            dist.all_reduce(Tensor.ones(4 + rank, 3))
            caught = None
        except dist.DistributedError as exc:
            caught = str(exc)
        # the communicator is still usable: the ranks go on together
        after = dist.all_reduce(Tensor([1.0])).numpy().tolist()
        with open(f"{__file__}.{rank}.json", "w") as f:
            json.dump({"caught": caught, "after": after}, f)
    """, 2)
    assert job.returncode == 0, job.stdout + job.stderr
    outputs = job.outputs()
    assert len(outputs) == 2
    for rank, output in enumerate(outputs):
        assert output["caught"].startswith(f"all_reduce #1 on rank {rank}: the ranks disagree on the shape "
                                           "(rank 0: (4, 3), rank 1: (5, 3))"), output
        assert output["after"] == [2.0]


def test_different_collectives_on_two_ranks_are_a_clear_error(tmp_path: Path, launch: Callable[..., Any]) -> None:
    job = launch(tmp_path, """
        import json
        from plygrad import distributed as dist
        from plygrad.frontend import Tensor
        rank = dist.rank()
        try:
            dist.all_reduce(Tensor([1.0])) if rank == 0 else dist.broadcast(Tensor([1.0]), src=0)
            caught = None
        except dist.DistributedError as exc:
            caught = str(exc)
        with open(f"{__file__}.{rank}.json", "w") as f:
            json.dump(caught, f)
    """, 2)
    assert job.returncode == 0, job.stdout + job.stderr
    outputs = job.outputs()
    assert len(outputs) == 2
    for message in outputs:
        assert "disagree on the op (rank 0: all_reduce(sum), rank 1: broadcast(root=0))" in message, message


def test_a_script_imports_the_modules_beside_it_as_under_plain_python(tmp_path: Path,
                                                                     launch: Callable[..., Any]) -> None:
    (tmp_path / "helper_beside.py").write_text("ANSWER = 42\n")
    job = launch(tmp_path, """
        from helper_beside import ANSWER
        print("answer", ANSWER, flush=True)
    """, 1)
    assert job.returncode == 0, job.stderr
    assert job.lines("answer ") == ["42"]


def test_an_exception_under_plain_mpiexec_ends_the_job_too(tmp_path: Path,
                                                          job_environment: Callable[..., dict[str, str]]) -> None:
    # no rank wrapper: the mpi provider's excepthook reports and aborts once the rank has joined the job
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent("""
        from plygrad import distributed as dist
        from plygrad.frontend import Tensor
        dist.barrier()
        if dist.rank() == 1:
            raise ValueError("rank 1 fails on purpose")
        while True:
            dist.all_reduce(Tensor([1.0]))
    """))
    env = job_environment({"PLYGRAD_DIST_TIMEOUT": "60"})
    started = time.monotonic()
    done = subprocess.run([run.find_mpiexec(), "-n", "2", sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, env=env, check=False)
    assert time.monotonic() - started < 30
    assert done.returncode != 0
    assert "[rank 1] ValueError: rank 1 fails on purpose" in done.stderr, done.stderr
