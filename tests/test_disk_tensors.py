"""Disk tensors (issue #32): tensors on `device="disk:/path"` (plygrad-disk), read through views, written through
assign and setitem, copied disk to disk, and checkpoints that map their file instead of reading it.

Every value is checked against NumPy doing the same thing to the same bytes, and file contents with numpy.fromfile.
The DISK backend's byte counters show what was read: a view reads its own bytes, a checkpoint the tensors used.
"""

from __future__ import annotations

import json
import pathlib
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from plygrad.backends.disk.allocator import COUNTERS
from plygrad.frontend import Tensor
from plygrad.frontend.nn.state import safe_load, torch_load
from plygrad.ir import DTypeError, dtypes
from plygrad.runtime.errors import BackendError

VALUES = np.arange(48, dtype=np.float32) * 0.5 - 3.0  # 48 float32s: views as (4, 12), (4, 4, 3), ...


@pytest.fixture
def file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "values.bin"
    VALUES.tofile(path)
    return path


def _on_disk(path: pathlib.Path) -> Tensor:
    return Tensor(path).bitcast(dtypes.float32)


def test_empty_creates_the_file_and_assign_writes_it(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "new.bin"
    t = Tensor.empty(6, dtype=dtypes.int32, device=f"disk:{path}")
    assert t.device == f"DISK:{path}" and t.shape == (6,) and t.dtype is dtypes.int32
    t.assign(Tensor(np.array([1, -2, 3, -4, 5, -6], np.int32)))
    np.testing.assert_array_equal(np.fromfile(path, np.int32), [1, -2, 3, -4, 5, -6])
    np.testing.assert_array_equal(t.numpy(), [1, -2, 3, -4, 5, -6])


def test_a_path_is_the_files_bytes(file: pathlib.Path) -> None:
    t = Tensor(file)
    assert t.dtype is dtypes.uint8 and t.shape == (VALUES.nbytes,) and t.device.startswith("DISK:")
    np.testing.assert_array_equal(t.numpy(), np.fromfile(file, np.uint8))
    np.testing.assert_array_equal(Tensor(file, dtype=dtypes.float32).numpy(), VALUES)


# each case: the view of the (48,) float32 disk tensor, and the same view in NumPy
VIEWS: dict[str, tuple[Callable[[Any], Any], Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]]]] = {
    "reshape": (lambda t: t.reshape(4, 12), lambda a: a.reshape(4, 12)),
    "outer slice": (lambda t: t.reshape(4, 12)[1:3], lambda a: a.reshape(4, 12)[1:3]),
    "row": (lambda t: t.reshape(4, 4, 3)[2], lambda a: a.reshape(4, 4, 3)[2]),
    "inner slice": (lambda t: t.reshape(4, 12)[:, 3:7], lambda a: a.reshape(4, 12)[:, 3:7]),
    "step": (lambda t: t.reshape(4, 12)[:, ::2], lambda a: a.reshape(4, 12)[:, ::2]),
    "negative step": (lambda t: t[40:2:-3], lambda a: a[40:2:-3]),
    "permute": (lambda t: t.reshape(4, 4, 3).permute(2, 0, 1), lambda a: a.reshape(4, 4, 3).transpose(2, 0, 1)),
    "flip": (lambda t: t.reshape(4, 12).flip(1), lambda a: a.reshape(4, 12)[:, ::-1]),
    "expand": (lambda t: t[:4].reshape(4, 1).expand(4, 3), lambda a: np.broadcast_to(a[:4].reshape(4, 1), (4, 3))),
    "pad": (lambda t: t[:6].pad(((1, 2),)), lambda a: np.pad(a[:6], (1, 2))),
    "reshape of a step": (lambda t: t.reshape(4, 12)[:, ::2].reshape(24),
                          lambda a: a.reshape(4, 12)[:, ::2].reshape(24)),
    "bitcast": (lambda t: t.reshape(4, 12).bitcast(dtypes.int32), lambda a: a.reshape(4, 12).view(np.int32)),
    "bitcast narrower": (lambda t: t[4:8].bitcast(dtypes.uint8), lambda a: a[4:8].view(np.uint8)),
    "bitcast wider": (lambda t: t.reshape(4, 12)[1:].bitcast(dtypes.float64),
                      lambda a: a.reshape(4, 12)[1:].view(np.float64)),
    "bitcast of a step": (lambda t: t.reshape(4, 12)[:, ::3].bitcast(dtypes.uint16),
                          lambda a: np.ascontiguousarray(a.reshape(4, 12)[:, ::3]).view(np.uint16)),
}


@pytest.mark.parametrize("case", VIEWS)
def test_views_read_like_numpy(file: pathlib.Path, case: str) -> None:
    view, reference = VIEWS[case]
    got = view(_on_disk(file))
    want = reference(np.fromfile(file, np.float32))
    assert got.shape == want.shape and got.numpy().dtype == want.dtype
    np.testing.assert_array_equal(got.to("CPU").numpy(), want)
    np.testing.assert_array_equal(got.numpy(), want)


def test_a_contiguous_view_reads_its_own_bytes_only(file: pathlib.Path) -> None:
    COUNTERS.reset()
    rows = _on_disk(file).reshape(4, 12)[2:3]
    assert COUNTERS.read == 0  # views read nothing
    np.testing.assert_array_equal(rows.to("CPU").realize().numpy(), VALUES.reshape(4, 12)[2:3])
    assert COUNTERS.read == 12 * 4


def test_a_strided_view_reads_the_range_it_covers(file: pathlib.Path) -> None:
    COUNTERS.reset()
    picked = _on_disk(file).reshape(4, 12)[1:3, 2:10:4]  # rows 1-2, columns 2 and 6: elements 14 .. 30
    np.testing.assert_array_equal(picked.numpy(), VALUES.reshape(4, 12)[1:3, 2:10:4])
    assert COUNTERS.read == (30 - 14 + 1) * 4


def test_compute_happens_after_the_copy(file: pathlib.Path) -> None:
    t = _on_disk(file).reshape(4, 12)
    np.testing.assert_allclose((t.to("CPU") * 2 + 1).sum(1).numpy(), (VALUES.reshape(4, 12) * 2 + 1).sum(1))


def test_realize_keeps_a_contiguous_view_and_refuses_a_strided_one(file: pathlib.Path) -> None:
    COUNTERS.reset()
    rows = _on_disk(file).reshape(4, 12)[1:3].realize()
    assert rows._is_realized() and COUNTERS.read == 0
    with pytest.raises(RuntimeError, match=r"not one contiguous range.*\.to\('CPU'\)"):
        _on_disk(file).reshape(4, 12)[:, ::2].realize()


WRITES: dict[str, tuple[Callable[[Any], Any], Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]]]] = {
    "whole": (lambda t: t, lambda a: a),
    "outer slice": (lambda t: t.reshape(4, 12)[1:3], lambda a: a.reshape(4, 12)[1:3]),
    "step": (lambda t: t.reshape(4, 12)[:, 1::3], lambda a: a.reshape(4, 12)[:, 1::3]),
    "permute": (lambda t: t.reshape(4, 12).permute(1, 0)[:5], lambda a: a.reshape(4, 12).T[:5]),
    "flip": (lambda t: t[10:20].flip(0), lambda a: a[10:20][::-1]),
}


@pytest.mark.parametrize("case", WRITES)
def test_assign_into_a_view_writes_the_file(file: pathlib.Path, case: str) -> None:
    view, reference = WRITES[case]
    target = view(_on_disk(file))
    value = np.arange(int(np.prod(target.shape)), dtype=np.float32).reshape(target.shape) + 100
    target.assign(Tensor(value))
    want = VALUES.copy()
    reference(want)[...] = value
    np.testing.assert_array_equal(np.fromfile(file, np.float32), want)
    np.testing.assert_array_equal(target.numpy(), value)


def test_setitem_writes_the_file(file: pathlib.Path) -> None:
    t = _on_disk(file).reshape(4, 12)
    want = VALUES.copy().reshape(4, 12)
    t[1] = 7.0
    t[2:4, ::5] = Tensor(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32))
    t[0, 1:3] = [8, 9]  # a list, cast to the tensor's dtype
    want[1], want[2:4, ::5], want[0, 1:3] = 7.0, [[1, 2, 3], [4, 5, 6]], [8, 9]
    np.testing.assert_array_equal(np.fromfile(file, np.float32).reshape(4, 12), want)


def test_disk_to_disk_copies(file: pathlib.Path, tmp_path: pathlib.Path) -> None:
    other = tmp_path / "copy.bin"
    copied = _on_disk(file).reshape(4, 12)[:, ::2].to(f"disk:{other}")
    assert copied.device == f"DISK:{other}"
    np.testing.assert_array_equal(np.fromfile(other, np.float32), VALUES.reshape(4, 12)[:, ::2].reshape(-1))
    into = Tensor.empty(12, dtype=dtypes.float32, device=f"disk:{tmp_path / 'into.bin'}")
    into.assign(_on_disk(file)[12:24])
    np.testing.assert_array_equal(np.fromfile(tmp_path / "into.bin", np.float32), VALUES[12:24])


def test_cpu_to_disk(tmp_path: pathlib.Path) -> None:
    values = np.linspace(-1, 1, 10).astype(np.float16)
    t = Tensor(values).to(f"disk:{tmp_path / 'h.bin'}")
    np.testing.assert_array_equal(np.fromfile(tmp_path / "h.bin", np.float16), values)
    np.testing.assert_array_equal(t.numpy(), values)


def test_writes_that_have_no_bytes_to_go_to_raise(file: pathlib.Path) -> None:
    t = _on_disk(file)
    with pytest.raises(RuntimeError, match="nowhere to write"):
        t[:6].pad(((1, 1),)).assign(Tensor(np.zeros(8, np.float32)))
    with pytest.raises(RuntimeError, match="nowhere to write"):
        t[:1].expand(4).assign(Tensor(np.zeros(4, np.float32)))
    with pytest.raises(DTypeError, match="cast it"):
        t[:4].assign(Tensor(np.zeros(4, np.int32)))
    np.testing.assert_array_equal(np.fromfile(file, np.float32), VALUES)  # nothing was written


def test_disk_without_a_path_says_how_to_name_one() -> None:
    with pytest.raises(BackendError, match=r"names no file.*disk:/path/to/file"):
        Tensor.empty(4, device="disk").numpy()


# ---- checkpoints map their file ---------------------------------------------------------------------------------
def _sparse_safetensors(path: pathlib.Path, big: int) -> np.ndarray[Any, Any]:
    """A safetensors file with a `big`-element float32 tensor that is a hole in the file (no bytes written) and
    a small one after it; returns the small one's values."""
    small = np.array([[1.5, -2.5, 3.25]], np.float32)
    header = json.dumps({"big": {"dtype": "F32", "shape": [big], "data_offsets": [0, 4 * big]},
                         "small": {"dtype": "F32", "shape": [1, 3], "data_offsets": [4 * big, 4 * big + 12]}}).encode()
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.seek(8 + len(header) + 4 * big)
        f.write(small.tobytes())
    return small


def test_safe_load_of_a_large_checkpoint_reads_only_what_is_used(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "model.safetensors"
    big = 50 << 20  # 200 MiB of float32
    small = _sparse_safetensors(path, big)
    COUNTERS.reset()
    loaded = safe_load(path)
    assert loaded["big"].shape == (big,) and COUNTERS.read == 0
    np.testing.assert_array_equal(loaded["small"].numpy(), small)
    assert COUNTERS.read == small.nbytes  # 12 bytes of a 200 MiB file


def test_safe_load_of_a_disk_tensor_maps_its_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "model.safetensors"
    small = _sparse_safetensors(path, 1 << 20)
    COUNTERS.reset()
    loaded = safe_load(Tensor(path))  # tinygrad's spelling
    np.testing.assert_array_equal(loaded["small"].numpy(), small)
    assert COUNTERS.read == small.nbytes


def test_torch_load_reads_only_the_tensors_used(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "model.pt"
    torch.manual_seed(0)
    state = {"embed": torch.randn(1024, 1024), "head": torch.randn(4, 3).t(), "bias": torch.arange(5)}
    torch.save(state, path)
    COUNTERS.reset()
    loaded = torch_load(path)
    assert COUNTERS.read == 0
    np.testing.assert_array_equal(loaded["head"].numpy(), state["head"].numpy())
    np.testing.assert_array_equal(loaded["bias"].numpy(), state["bias"].numpy())
    assert COUNTERS.read == (12 + 5 * 2) * 4  # not the 4 MiB embedding
    np.testing.assert_array_equal(loaded["embed"][3].numpy(), state["embed"][3].numpy())


def _random_view(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """A random basic index of `shape`: per axis an int, or a slice with a random start, stop and step (either
    sign)."""
    index: list[Any] = []
    for n in shape:
        if rng.random() < 0.2:
            index.append(int(rng.integers(-n, n)))
            continue
        step = int(rng.choice([-3, -2, -1, 1, 2, 3, 4]))
        start, stop = sorted(int(v) for v in rng.integers(0, n + 1, 2))
        index.append(slice(start, stop, step) if step > 0 else slice(stop - 1 if stop else None, start - 1 if start
                                                                       else None, step))
    return tuple(index)


@pytest.mark.parametrize("seed", range(4))
def test_writes_through_random_strided_views_match_numpy(tmp_path: pathlib.Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    path = tmp_path / "r.bin"
    want = np.zeros((4, 6, 5), np.float32)
    want.tofile(path)
    t = _on_disk(path).reshape(4, 6, 5)
    for _ in range(6):
        index = _random_view(rng, want.shape)
        view = t[index]
        if rng.random() < 0.5 and view.ndim >= 2:
            view, reference = view.transpose(0, 1), want[index].swapaxes(0, 1)
        else:
            reference = want[index]
        assert view.shape == reference.shape, index
        value = rng.standard_normal(reference.shape).astype(np.float32)
        view.assign(Tensor(value))
        reference[...] = value
        np.testing.assert_array_equal(np.fromfile(path, np.float32).reshape(want.shape), want, err_msg=str(index))


@pytest.mark.parametrize("seed", range(2))
def test_reads_through_random_strided_views_match_numpy(tmp_path: pathlib.Path, seed: int) -> None:
    rng = np.random.default_rng(10 + seed)
    path = tmp_path / "r.bin"
    values = rng.standard_normal((4, 6, 5)).astype(np.float32)
    values.tofile(path)
    t = _on_disk(path).reshape(4, 6, 5)
    for _ in range(2):
        index = _random_view(rng, values.shape)
        want = values[index]
        COUNTERS.reset()
        np.testing.assert_array_equal(t[index].numpy(), want, err_msg=str(index))
        if want.size:  # it reads no more than the bytes from its first element to its last
            offsets = np.arange(values.size).reshape(values.shape)[index]
            assert COUNTERS.read <= (int(offsets.max()) - int(offsets.min()) + 1) * 4, index


def test_data_made_on_disk_is_in_the_file_before_any_view_reads_it(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "made.bin"
    Tensor([7.0, 8.0], device=f"disk:{path}").realize()  # realize() writes the file
    np.testing.assert_array_equal(np.fromfile(path, np.float32), [7, 8])
    t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=f"disk:{path}")
    np.testing.assert_array_equal(t[1].numpy(), [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(np.fromfile(path, np.float32), [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(t.numpy(), [[1, 2, 3], [4, 5, 6]])


def test_load_state_dict_copies_disk_tensors_to_the_model(tmp_path: pathlib.Path) -> None:
    from plygrad.frontend import nn
    from plygrad.frontend.nn.state import load_state_dict

    weight, bias = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1.0, -1.0], np.float32)
    bias.tofile(tmp_path / "b.bin")
    layer = nn.Linear(3, 2)
    load_state_dict(layer, {"weight": Tensor(weight).to(f"disk:{tmp_path / 'w.bin'}"),
                            "bias": Tensor(tmp_path / "b.bin", dtype=dtypes.float32)})
    assert layer.weight.device == Tensor([1.0]).device
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), x @ weight.T + bias)


def test_assign_takes_numpy_arrays_and_lists_as_assign_does(file: pathlib.Path) -> None:
    t = _on_disk(file)
    t[2:4].assign(np.array([10, 20]))  # made a float32 tensor first, as LazyTensor.assign does
    t[4:6].assign([30.5, 40.5])
    want = VALUES.copy()
    want[2:6] = [10, 20, 30.5, 40.5]
    np.testing.assert_array_equal(np.fromfile(file, np.float32), want)
