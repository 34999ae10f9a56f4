"""A scheduler plugin's malformed output is refused with an error that names the plugin (entry point, module,
distribution) and the check that failed: bytes that are not bytes or do not decode, a LINEAR or kernel that fails
verification, buffers that do not fit the graph. Toy plugins built on `default`'s schedule break one thing each."""

from __future__ import annotations

import importlib
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from plygrad.frontend import Tensor
from plygrad.frontend.scheduling import SCHEDULERS, find_scheduler
from plygrad.ir import BufferRef, Ops, Stage, UOp, deserialize, dtypes, serialize
from plygrad.runtime import discovery
from plygrad.runtime.errors import MalformedScheduleError, ScheduleError
from plygrad.runtime.plugin_output import CHECK_BUFFERS, CHECK_BYTES, CHECK_DECODE, CHECK_VERIFY

ScheduleFn = Callable[[bytes], bytes]


def _default(data: bytes) -> UOp:
    return deserialize(find_scheduler("default")(data), Stage.SCHEDULE)


def not_bytes(data: bytes) -> bytes:
    return "a schedule"  # type: ignore[return-value]  # the mistake under test


def garbage(data: bytes) -> bytes:
    return b"\x89PLYIR but then nonsense"


def float_loop(data: bytes) -> bytes:
    """A kernel whose RANGE is a float32: fails KERNEL verification (written without a stage: serialize does not
    verify, the reader does)."""
    linear = _default(data)
    ranges = {n: UOp(Ops.RANGE, dtypes.float32, n.src, n.arg) for c in linear.src for n in c.src[0].toposort
              if n.op is Ops.RANGE}
    return serialize(linear.substitute(ranges), Stage.SCHEDULE)


def extra_output(data: bytes) -> bytes:
    linear = _default(data)
    return serialize(linear.replace(arg=(*linear.arg, linear.arg[0])), Stage.SCHEDULE)


def _graph_buffers(linear: UOp) -> list[UOp]:
    """The BUFFERs the tensor graph gave (ids >= 0; the schedule's new buffers are negative)."""
    return [n for c in linear.src for n in c.src[1:] if n.op is Ops.BUFFER and n.arg.id >= 0]


def bigger_input(data: bytes) -> bytes:
    """The graph's input buffer declared 4 elements longer than it is."""
    linear = _default(data)
    grown = {n: UOp(Ops.BUFFER, n.dtype, (), BufferRef(n.arg.id, n.arg.device, n.arg.size + 4))
             for n in _graph_buffers(linear)}
    return serialize(linear.substitute(grown), Stage.SCHEDULE)


def names_the_input(data: bytes) -> bytes:
    """LINEAR.arg names the graph's float32 input as the buffer holding a bool tensor."""
    linear = _default(data)
    return serialize(linear.replace(arg=(_graph_buffers(linear)[0].arg.id,)), Stage.SCHEDULE)


@pytest.mark.parametrize(("toy", "check", "detail"), [
    (not_bytes, CHECK_BYTES, "got a str"),
    (garbage, CHECK_DECODE, "magic"),
    (float_loop, CHECK_VERIFY, "KERNEL: RANGE"),
    (extra_output, CHECK_BUFFERS, "LINEAR.arg names 2 output buffers for a tensor graph of 1 tensors"),
    (bigger_input, CHECK_BUFFERS, "is 10 x dtypes.float32 on CPU, but the Buffer given for it is 6"),
    (names_the_input, CHECK_BUFFERS, "output 0 is a buffer of 6 x dtypes.float32, but SINK source 0 is a CMPLT of "
                                     "6 x dtypes.bool"),
])
def test_a_malformed_schedule_names_the_plugin_and_the_check(toy: ScheduleFn, check: str, detail: str) -> None:
    x = Tensor(np.arange(6, dtype=np.float32))
    with discovery.installed(SCHEDULERS, "toy", toy), Tensor.scheduler("toy"), \
            pytest.raises(MalformedScheduleError) as caught:
        (x * 2 + 1 > 4).numpy()
    err = caught.value
    assert err.check == check and err.producer == f"scheduler 'toy' (in-process {__name__}.{toy.__name__})"
    assert f"the schedule from {err.producer} {check}" in str(err)
    assert detail in str(err)
    assert isinstance(err, ScheduleError)  # code catching the runtime's ScheduleError still catches it


def test_tensor_schedule_names_the_plugin_too() -> None:
    x = Tensor(np.arange(6, dtype=np.float32))
    with discovery.installed(SCHEDULERS, "toy", garbage), Tensor.scheduler("toy"), \
            pytest.raises(MalformedScheduleError, match=r"from scheduler 'toy' \(in-process"):
        (x + 1).schedule()


def test_the_same_graph_runs_under_default() -> None:
    """The control: only the toys' changes were refused."""
    x = Tensor(np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal((x * 2 + 1 > 4).numpy(), np.arange(6, dtype=np.float32) * 2 + 1 > 4)


def test_an_installed_distribution_is_named_by_entry_point_and_distribution(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A real entry point (a dist-info folder on sys.path, as pip would install it) is named with its module and
    its distribution's name and version."""
    (tmp_path / "toy_sched.py").write_text(textwrap.dedent("""\
        def schedule(data):
            return b"not a schedule"
        """))
    info = tmp_path / "toy_sched-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-sched\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text("[plygrad.schedulers]\ntoyinstalled = toy_sched:schedule\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    x = Tensor(np.arange(3, dtype=np.float32))
    with Tensor.scheduler("toyinstalled"), pytest.raises(MalformedScheduleError) as caught:
        (x + 1).numpy()
    assert caught.value.producer == "scheduler 'toyinstalled' (toy_sched:schedule from distribution toy-sched 1.2)"
