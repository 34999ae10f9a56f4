"""A process no launcher started is a world of one: every collective is the identity, DataParallel changes
nothing, and neither needs mpi4py. Also how the provider is chosen and how a bad one is reported."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from plygrad import distributed as dist
from plygrad.distributed import mpi, run
from plygrad.frontend import Tensor
from plygrad.frontend.nn import Linear
from plygrad.runtime import collectives, discovery
from plygrad.runtime.collectives import CollectiveError, CollectiveProvider, LocalProvider

DTYPES = [np.float32, np.float16, np.int32]


def _values(dtype: type) -> np.ndarray[Any, Any]:
    return (np.arange(12).reshape(3, 4) - 5).astype(dtype)


def test_init_is_rank_0_of_1_through_the_local_provider() -> None:
    w = dist.init()
    assert (w.rank, w.world_size, w.local_rank) == (0, 1, 0)
    assert isinstance(w.provider, LocalProvider)
    assert (dist.rank(), dist.world_size(), dist.local_rank()) == (0, 1, 0)


# the mean of integers is an error (test_mean_of_integers_is_an_error)
REDUCTIONS = [(dtype, op) for dtype in DTYPES for op in ("sum", "max", "min", "mean")
              if not (op == "mean" and dtype is np.int32)]


@pytest.mark.parametrize(("dtype", "op"), REDUCTIONS)
def test_all_reduce_is_the_identity(dtype: type, op: str) -> None:
    x = _values(dtype)
    out = dist.all_reduce(Tensor(x), op)
    assert out.dtype == Tensor(x).dtype
    np.testing.assert_array_equal(out.numpy(), x)


def test_all_reduce_in_place_writes_into_the_tensor() -> None:
    t = Tensor(_values(np.float32))
    assert dist.all_reduce_(t) is t
    np.testing.assert_array_equal(t.numpy(), _values(np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_and_all_gather_are_the_identity(dtype: type) -> None:
    x = _values(dtype)
    np.testing.assert_array_equal(dist.broadcast(Tensor(x), src=0).numpy(), x)
    gathered = dist.all_gather(Tensor(x))
    assert gathered.shape == (1, 3, 4)
    np.testing.assert_array_equal(gathered.numpy()[0], x)
    dist.barrier()


def test_mean_of_integers_is_an_error() -> None:
    with pytest.raises(dist.DistributedError, match="'mean' needs a floating-point"):
        dist.all_reduce(Tensor(_values(np.int32)), "mean")


def test_an_unknown_op_is_an_error_listing_the_ops() -> None:
    with pytest.raises(dist.DistributedError, match=r"unknown op 'prod'.*sum, max, min, mean"):
        dist.all_reduce(Tensor([1.0]), "prod")


def test_broadcast_from_a_rank_that_does_not_exist_is_an_error() -> None:
    with pytest.raises(CollectiveError, match="root 1 is not a rank of this job"):
        dist.broadcast(Tensor([1.0]), src=1)


def test_the_provider_checks_its_buffers() -> None:
    provider = LocalProvider()
    f32 = dist.ReduceOp.SUM
    with pytest.raises(CollectiveError, match="read-only"):
        provider.all_reduce(memoryview(bytes(8)), Tensor([1.0]).dtype, f32)
    with pytest.raises(CollectiveError, match="not a whole number"):
        provider.all_reduce(memoryview(bytearray(6)), Tensor([1.0]).dtype, f32)
    with pytest.raises(CollectiveError, match="not C-contiguous"):
        provider.all_reduce(memoryview(np.zeros((4, 4), np.float32)[:, ::2]), Tensor([1.0]).dtype, f32)


def test_data_parallel_changes_nothing() -> None:
    Tensor.manual_seed(0)
    layer = Linear(3, 2)
    weight, bias = layer.weight.numpy(), layer.bias.numpy()
    dp = dist.DataParallel(layer)
    assert len(dp.params) == 2
    layer(Tensor(np.ones((4, 3), np.float32))).sum().backward()
    grads = [p.grad for p in dp.params]
    dp.sync_gradients()
    dp.sync_buffers()
    assert [p.grad for p in dp.params] == grads  # the same tensors, untouched
    np.testing.assert_array_equal(layer.weight.numpy(), weight)
    np.testing.assert_array_equal(layer.bias.numpy(), bias)


def test_buckets_group_one_dtype_up_to_the_size() -> None:
    from plygrad.distributed.data_parallel import buckets

    tensors = [Tensor.zeros(10), Tensor.zeros(10), Tensor.zeros(30), Tensor.zeros(5, dtype="int32"), Tensor.zeros(5)]
    assert buckets(tensors, 80) == [[0, 1], [2], [3], [4]]  # 40 + 40 bytes fit, the 120-byte one is alone
    assert buckets(tensors, 10**6) == [[0, 1, 2], [3], [4]]


def test_the_world_of_one_needs_no_mpi4py(tmp_path: Path, run_alone: Callable[..., Any]) -> None:
    job = run_alone(tmp_path, """
        import sys
        sys.modules["mpi4py"] = None  # an import of mpi4py now raises ImportError
        from plygrad import distributed as dist
        from plygrad.frontend import Tensor
        print("world", dist.world_size(), dist.all_reduce(Tensor([2.0, 3.0])).numpy().tolist())
    """)
    assert job.returncode == 0, job.stderr
    assert job.lines("world ") == ["1 [2.0, 3.0]"]


def test_the_mpi_provider_without_mpi4py_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)
    with pytest.raises(dist.DistributedError, match=r"pip install plygrad-distributed\[mpi\]"):
        mpi.open_mpi()


@pytest.mark.parametrize(("variables", "expected"), [
    ({}, "local"),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "mpi"),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, "mpi"),
    ({"PMIX_RANK": "0"}, "mpi"),
    ({"PMI_RANK": "0", "PLYGRAD_COLLECTIVES": "local"}, "local"),
])
def test_the_provider_is_mpi_under_an_mpi_launcher(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str],
                                                   expected: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert collectives.provider_name() == expected


def test_the_mpi_entry_point_is_installed() -> None:
    assert "mpi" in collectives.available()
    assert "local" in collectives.available()


def test_an_environment_that_contradicts_the_provider_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(dist.DistributedError, match=r"rank 1 of 2 \(RANK/WORLD_SIZE\).*'local'.*rank 0 of 1"):
        dist.init()


def test_local_rank_comes_from_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert dist.local_rank() == 3


class _NotAProvider:
    pass


def _raises() -> CollectiveProvider:
    raise OSError("no network here")


@pytest.mark.parametrize(("plugin", "message"), [
    (_NotAProvider, "returned _NotAProvider, not a CollectiveProvider"),
    (_raises, "failed to open: OSError: no network here"),
    (42, "is not callable"),
])
def test_a_bad_provider_plugin_is_a_clear_error_naming_it(monkeypatch: pytest.MonkeyPatch, plugin: object,
                                                          message: str) -> None:
    monkeypatch.setenv("PLYGRAD_COLLECTIVES", "broken")
    with discovery.installed(collectives.COLLECTIVES, "broken", plugin):
        collectives.reset()
        with pytest.raises(CollectiveError, match=message) as info:
            dist.init()
    assert "'broken'" in str(info.value)


def test_an_unknown_provider_lists_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_COLLECTIVES", "carrier-pigeon")
    with pytest.raises(CollectiveError, match=r"'carrier-pigeon'.*local, mpi"):
        dist.init()


def test_the_launcher_without_mpiexec_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(run.sys, "executable", str(tmp_path / "python"))  # no mpiexec beside it
    monkeypatch.setenv("PATH", str(tmp_path))  # nor on PATH
    assert run.main(["-n", "2", str(tmp_path / "x.py")]) == 2
    assert "pip install plygrad-distributed[mpi]" in capsys.readouterr().err
