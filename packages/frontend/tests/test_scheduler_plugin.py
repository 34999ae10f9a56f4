"""Finding the scheduler through `plygrad.schedulers` (a fake one plugged in), and buffer lifetimes."""

from __future__ import annotations

import gc
import importlib.metadata
import weakref

import numpy as np
import pytest

from plygrad.frontend import SchedulerNotFoundError, Tensor, scheduler_name, scheduling
from plygrad.frontend.scheduling import SCHEDULERS
from plygrad.ir import Ops, Stage, UOp, deserialize, dtypes, serialize
from plygrad.runtime import Buffer
from plygrad.runtime.discovery import installed, plugins


class FakeScheduler:
    """Schedules a graph that is already one buffer: an empty LINEAR naming that buffer (valid without kernels)."""

    def __init__(self) -> None:
        self.seen: list[UOp] = []

    def __call__(self, data: bytes) -> bytes:
        sink = deserialize(data, Stage.TENSOR)
        self.seen.append(sink)
        ids = []
        for root in sink.src:
            node = root
            while node.op is Ops.RESHAPE:
                node = node.src[0]
            assert node.op is Ops.BUFFER, "the fake scheduler only handles realized tensors"
            ids.append(node.arg.id)
        return serialize(UOp(Ops.LINEAR, dtypes.void, (), tuple(ids)), Stage.SCHEDULE)


def test_missing_scheduler_says_which_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLYGRAD_SCHEDULER", "no-such-scheduler")
    with pytest.raises(SchedulerNotFoundError, match=r"no-such-scheduler.*pip install plygrad-scheduler"):
        (Tensor.ones(2) + 1).schedule()


def test_no_scheduler_installed_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.entry_points

    def without_schedulers(**params: str) -> importlib.metadata.EntryPoints:
        if params.get("group") == SCHEDULERS:
            return importlib.metadata.EntryPoints(())
        return real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", without_schedulers)
    monkeypatch.setattr(scheduling, "_LOADED", {})
    with pytest.raises(SchedulerNotFoundError, match=r"'default' \(found: none\); pip install plygrad-scheduler"):
        Tensor(np.ones(3, dtype=np.float32)).exp().realize()


def test_plygrad_scheduler_picks_the_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, other = FakeScheduler(), FakeScheduler()
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    with installed(SCHEDULERS, "fake", fake), installed(SCHEDULERS, "other", other):
        monkeypatch.setenv("PLYGRAD_SCHEDULER", "fake")
        assert scheduler_name() == "fake"
        linear = x.schedule()
        assert linear.op is Ops.LINEAR and len(linear.src) == 0
        assert len(fake.seen) == 1 and not other.seen
        with Tensor.scheduler("other"):
            assert scheduler_name() == "other"
            x.schedule()
        assert len(other.seen) == 1 and scheduler_name() == "fake"
    assert "fake" not in plugins(SCHEDULERS)


def test_scheduler_receives_the_tensor_graph_as_bytes() -> None:
    fake = FakeScheduler()
    x = Tensor(np.ones((2, 3), dtype=np.float32))
    with installed(SCHEDULERS, "default", fake):
        x.schedule()
    (sink,) = fake.seen
    assert sink.src == (x.uop,)


def test_tensors_keep_the_buffers_they_read_alive_and_free_them_when_dropped() -> None:
    x = Tensor(np.ones((4,), dtype=np.float32))
    (buf,) = x.inputs
    ref = weakref.ref(buf)
    y = (x + 1).exp() * 2
    del x, buf
    gc.collect()
    assert ref() is not None, "y still reads the buffer, so it must stay alive"
    assert ref() in y.inputs
    del y
    gc.collect()
    assert ref() is None, "no tensor reads the buffer any more: it must be freed"


def test_graph_names_buffers_by_id_only() -> None:
    x = Tensor(np.ones((2, 2), dtype=np.int16))
    (buf,) = x.inputs
    assert isinstance(buf, Buffer) and buf.dtype is dtypes.int16 and buf.size == 4
    assert not buf.allocated, "data is staged on the host until a realize needs it"
    node = x.uop.src[0]
    assert node.op is Ops.BUFFER and node.arg.id == buf.id
