"""plygrad.frontend.nn.state: state dicts (PyTorch's key names, in-place loading), safetensors files (against the
reference `safetensors` library, hostile files, memory-mapped laziness) and PyTorch checkpoints read without torch."""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile
from collections import OrderedDict, namedtuple
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.frontend import Tensor, dtypes, nn
from plygrad.frontend.nn.state import (
    CheckpointError,
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
    torch_load,
)
from plygrad.ir import DType

Array = np.ndarray[Any, Any]

# every safetensors dtype: (plygrad dtype, numpy dtype for the reference library, torch dtype)
DTYPES: list[tuple[DType, Any, torch.dtype]] = [
    (dtypes.float64, np.float64, torch.float64), (dtypes.float32, np.float32, torch.float32),
    (dtypes.float16, np.float16, torch.float16), (dtypes.bfloat16, None, torch.bfloat16),
    (dtypes.int64, np.int64, torch.int64), (dtypes.int32, np.int32, torch.int32),
    (dtypes.int16, np.int16, torch.int16), (dtypes.int8, np.int8, torch.int8), (dtypes.uint8, np.uint8, torch.uint8),
    (dtypes.bool, np.bool_, torch.bool), (dtypes.uint16, np.uint16, torch.uint16),
    (dtypes.uint32, np.uint32, torch.uint32), (dtypes.uint64, np.uint64, torch.uint64),
]


def _values(np_dtype: Any, shape: tuple[int, ...], seed: int = 0) -> Array:
    rng = np.random.default_rng(seed)
    if np.dtype(np_dtype).kind == "f":
        return rng.standard_normal(shape).astype(np_dtype)
    if np.dtype(np_dtype).kind == "b":
        return rng.integers(0, 2, shape).astype(np.bool_)
    info = np.iinfo(np_dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(np_dtype)


def _torch_values(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape).bool()
    return torch.randint(0, 100, shape).to(dtype)


def _as_numpy(t: torch.Tensor) -> Array:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


# ---- state dicts ----------------------------------------------------------------------------------------------------
class Block:
    def __init__(self) -> None:
        self.conv1 = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.layers = [nn.Linear(12, 5), nn.Linear(5, 4, bias=False)]

    def __call__(self, x: Tensor) -> Tensor:
        x = self.bn(self.conv1(x)).relu().reshape(x.shape[0], -1)
        return self.layers[1](self.layers[0](x).relu())


class TorchBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(3)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(12, 5), torch.nn.Linear(5, 4, bias=False)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.conv1(x)).relu().reshape(x.shape[0], -1)
        return self.layers[1](self.layers[0](x).relu())  # type: ignore[no-any-return]


def _trained_torch_block() -> TorchBlock:
    """A torch model with non-default running statistics (one training-mode forward), put in eval mode."""
    torch.manual_seed(0)
    model = TorchBlock()
    model(torch.randn(4, 2, 2, 2))
    return model.eval()


def test_state_dict_keys_match_pytorch() -> None:
    # the same keys; the order follows attribute assignment order in each layer's __init__
    assert sorted(get_state_dict(Block())) == sorted(TorchBlock().state_dict())


def test_state_dict_walks_containers_and_prefix() -> None:
    pair = namedtuple("pair", ["left", "right"])
    a, b, c = Tensor([1.0]), Tensor([2.0]), Tensor([3.0])
    obj = {"x": (a, [b]), "p": pair(c, None), "n": 3, "s": "text"}
    assert get_state_dict(obj, prefix="m.") == {"m.x.0": a, "m.x.1.0": b, "m.p.left": c}


def test_state_dict_survives_cycles_and_keeps_tied_keys() -> None:
    class Net:
        def __init__(self) -> None:
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight  # tied
            self.me = self

    net = Net()
    assert list(get_state_dict(net)) == ["embed.weight", "head.weight"]
    assert get_parameters(net) == [net.embed.weight]


def test_load_state_dict_from_torch_matches_outputs_and_stays_in_place() -> None:
    ref = _trained_torch_block()
    model = Block()
    before = get_parameters(model)
    loaded = load_state_dict(model, {k: Tensor(v.numpy()) for k, v in ref.state_dict().items()})
    assert [id(t) for t in get_parameters(model)] == [id(t) for t in before]
    assert {id(t) for t in loaded} == {id(t) for t in before}
    x = np.random.default_rng(1).standard_normal((2, 2, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(model(Tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5,
                               rtol=1e-5)


def test_load_state_dict_keeps_optimizer_working() -> None:
    layer = nn.Linear(3, 2)
    opt = nn.optim.SGD(get_parameters(layer), lr=0.5)
    w = np.ones((2, 3), np.float32)
    load_state_dict(layer, {"weight": Tensor(w), "bias": Tensor(np.zeros(2, np.float32))})
    with Tensor.train():
        layer(Tensor(np.ones((1, 3), np.float32))).sum().backward()
        opt.step()
    np.testing.assert_allclose(layer.weight.numpy(), w - 0.5)  # the optimizer's tensors are the model's
    assert layer.bias is not None
    np.testing.assert_allclose(layer.bias.numpy(), [-0.5, -0.5])


@pytest.mark.parametrize("lazy", [False, True], ids=["realized", "lazy"])
def test_load_state_dict_does_not_share_memory_with_the_source(lazy: bool) -> None:
    class Holder:
        def __init__(self) -> None:
            self.weight = Tensor.zeros(2, 2) if lazy else Tensor.zeros(2, 2).contiguous().realize()

    model = Holder()
    source = {"weight": Tensor(np.ones((2, 2), np.float32))}
    load_state_dict(model, source)
    model.weight.assign(model.weight * 3).realize()
    np.testing.assert_array_equal(model.weight.numpy(), np.full((2, 2), 3.0))
    np.testing.assert_array_equal(source["weight"].numpy(), np.ones((2, 2)))


def test_load_state_dict_converts_dtype_and_accepts_scalar_vs_one() -> None:
    class Holder:
        def __init__(self) -> None:
            self.w = Tensor.zeros(2, 2).contiguous().realize()
            self.count = Tensor.zeros((), dtype=dtypes.int64).contiguous().realize()

    h = Holder()
    load_state_dict(h, {"w": Tensor(np.full((2, 2), 1.5)), "count": Tensor(np.array([7], np.int32))})
    assert h.w.dtype is dtypes.float32 and h.count.dtype is dtypes.int64 and h.count.shape == ()
    np.testing.assert_array_equal(h.w.numpy(), np.full((2, 2), 1.5, np.float32))
    assert h.count.item() == 7


def test_load_state_dict_strict_lists_missing_and_unexpected_keys() -> None:
    layer = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) \(1\): bias.*Unexpected key\(s\) \(1\): extra"):
        load_state_dict(layer, {"weight": Tensor.zeros(2, 2), "extra": Tensor.zeros(1)})
    load_state_dict(layer, {"weight": Tensor.zeros(2, 2), "extra": Tensor.zeros(1)}, strict=False)
    assert not layer.weight.numpy().any()


def test_load_state_dict_shape_mismatch_names_key_and_shapes() -> None:
    with pytest.raises(ValueError, match=r"'weight'.*\(2, 3\).*\(3, 2\)"):
        load_state_dict(nn.Linear(3, 2), {"weight": Tensor.zeros(3, 2), "bias": Tensor.zeros(2)})


# ---- safetensors ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "np_dtype", "torch_dtype"), DTYPES, ids=[d[0].name for d in DTYPES])
def test_safetensors_round_trip_every_dtype(tmp_path: Path, dtype: DType, np_dtype: Any,
                                            torch_dtype: torch.dtype) -> None:
    values = {"a": _torch_values(torch_dtype, (3, 4)), "scalar": _torch_values(torch_dtype, ()),
              "empty": _torch_values(torch_dtype, (0, 2))}
    ours = {k: Tensor(_as_numpy(v), dtype=dtype) for k, v in values.items()}
    safe_save(ours, tmp_path / "ours.safetensors")
    back = safe_load(tmp_path / "ours.safetensors")
    assert list(back) == list(values)
    for k, v in values.items():
        assert back[k].dtype is dtype and back[k].shape == tuple(v.shape)
        np.testing.assert_array_equal(back[k].numpy(), _as_numpy(v))
    # the reference library reads ours, and we read the reference library's
    theirs = safetensors.torch.load_file(tmp_path / "ours.safetensors")
    for k, v in values.items():
        assert theirs[k].dtype == torch_dtype and torch.equal(theirs[k], v)
    safetensors.torch.save_file(values, tmp_path / "theirs.safetensors")
    for k, t in safe_load(tmp_path / "theirs.safetensors").items():
        assert t.dtype is dtype
        np.testing.assert_array_equal(t.numpy(), _as_numpy(values[k]))


@settings(max_examples=8, deadline=None)
@given(shapes=st.lists(st.lists(st.integers(0, 4), max_size=3), min_size=1, max_size=4))
def test_safetensors_numpy_reference_reads_and_writes(tmp_path_factory: pytest.TempPathFactory,
                                                      shapes: list[list[int]]) -> None:
    path = tmp_path_factory.mktemp("st") / "x.safetensors"
    arrays = {f"t{i}": _values([np.float32, np.int16, np.uint8][i % 3], tuple(s), seed=i) for i, s in enumerate(shapes)}
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "np"})
    loaded = safe_load(path)
    assert sorted(loaded) == sorted(arrays)
    for k, a in arrays.items():
        np.testing.assert_array_equal(loaded[k].numpy(), a)
    safe_save(loaded, path, metadata={"format": "pg"})
    again = safetensors.numpy.load_file(str(path))
    for k, a in arrays.items():
        np.testing.assert_array_equal(again[k], a)


def test_safe_save_realizes_views_and_metadata_round_trips(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = tmp_path / "m.safetensors"
    safe_save({"t": Tensor(x).transpose(), "sum": Tensor(x) + 1}, path, metadata={"step": "3"})
    loaded = safe_load(path)
    np.testing.assert_array_equal(loaded["t"].numpy(), x.T)
    np.testing.assert_array_equal(loaded["sum"].numpy(), x + 1)
    source, start, header = safe_load_metadata(path)
    assert header["__metadata__"] == {"step": "3"} and header["t"]["shape"] == [4, 3]
    assert start % 8 == 0 and source.dtype is dtypes.uint8 and source.shape == (path.stat().st_size,)
    with path.open("rb") as f:
        assert safetensors.safe_open(f.name, "np").metadata() == {"step": "3"}  # type: ignore[no-untyped-call]


def test_safe_load_from_a_tensor_of_the_file_bytes(tmp_path: Path) -> None:
    safetensors.numpy.save_file({"w": np.eye(3, dtype=np.float32)}, str(tmp_path / "w.safetensors"))
    raw = np.frombuffer((tmp_path / "w.safetensors").read_bytes(), dtype=np.uint8)
    np.testing.assert_array_equal(safe_load(Tensor(raw))["w"].numpy(), np.eye(3))


def test_safe_save_rejects_bad_metadata_and_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="metadata must map str to str"):
        safe_save({"a": Tensor([1.0])}, tmp_path / "a", metadata={"n": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="__metadata__"):
        safe_save({"__metadata__": Tensor([1.0])}, tmp_path / "a")


def _file(header: dict[str, Any] | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


_F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
HOSTILE: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "too short"),
    "short length": (b"\x01\x02\x03", "too short"),
    "header beyond file": (_file({"a": _F32}, bytes(8), length=10_000), "declares a 10000-byte header"),
    "huge header length": (struct.pack("<Q", 2**63) + b"{}", "header"),
    "not json": (_file(b"{nope"), "not valid JSON"),
    "not utf8": (_file(b"\xff\xfe"), "not valid JSON"),
    "deep json": (_file(b"[" * 100_000 + b"]" * 100_000), "not valid JSON"),
    "json list": (_file(b"[1, 2]"), "not an object"),
    "duplicate key": (_file(b'{"a": {}, "a": {}}'), "duplicate keys"),
    "missing fields": (_file({"a": {"dtype": "F32"}}), "needs dtype, shape and data_offsets"),
    "unknown dtype": (_file({"a": {**_F32, "dtype": "F8_E9"}}, bytes(8)), "unknown dtype 'F8_E9'"),
    "negative shape": (_file({"a": {**_F32, "shape": [-2]}}, bytes(8)), "non-negative ints"),
    "offsets beyond file": (_file({"a": {**_F32, "data_offsets": [0, 8]}}, bytes(4)), "data_offsets"),
    "reversed offsets": (_file({"a": {**_F32, "data_offsets": [8, 0]}}, bytes(8)), "data_offsets"),
    "float offsets": (_file({"a": {**_F32, "data_offsets": [0.0, 8.0]}}, bytes(8)), "data_offsets"),
    "size mismatch": (_file({"a": {**_F32, "shape": [3]}}, bytes(8)), "needs 12 bytes"),
    "terabyte offsets": (_file({"a": {**_F32, "shape": [2**38], "data_offsets": [0, 2**40]}}, bytes(8)),
                         r"data_offsets \[0, 1099511627776\].*<= 8 "),
    "terabyte shape": (_file({"a": {**_F32, "shape": [2**38]}}, bytes(8)), "needs 1099511627776 bytes but"),
    "overlap": (_file({"a": _F32, "b": {**_F32, "data_offsets": [4, 12]}}, bytes(12)), "overlap"),
    "bad metadata": (_file({"__metadata__": {"k": 1}}), "__metadata__"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_safetensors_raise_value_error_naming_the_file(tmp_path: Path, name: str) -> None:
    content, message = HOSTILE[name]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as info:
        safe_load(path)
    assert str(path) in str(info.value)


def test_safe_load_is_lazy_and_memory_mapped(tmp_path: Path) -> None:
    """A 4 GiB (sparse) file opens at once; nothing is read, allocated or copied until a tensor is realized."""
    big = 1 << 30
    header = json.dumps({"big": {"dtype": "F32", "shape": [big], "data_offsets": [0, 4 * big]},
                         "small": {"dtype": "F32", "shape": [2], "data_offsets": [4 * big, 4 * big + 8]}}).encode()
    path = tmp_path / "big.safetensors"
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4 * big)
        f.seek(8 + len(header) + 4 * big)
        f.write(np.array([1.5, 2.5], np.float32).tobytes())
    start = time.perf_counter()
    loaded = safe_load(path)
    assert time.perf_counter() - start < 1.0
    (big_buffer,) = loaded["big"].inputs
    assert loaded["big"].shape == (big,) and not big_buffer.allocated
    np.testing.assert_array_equal(loaded["small"].numpy(), [1.5, 2.5])
    assert not big_buffer.allocated


def test_loaded_tensors_see_the_file_as_of_realize_and_survive_deletion(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    safetensors.numpy.save_file({"x": np.arange(4, dtype=np.float32)}, str(path))
    x = safe_load(path)["x"]
    os.remove(path)  # the mapping keeps the data alive
    np.testing.assert_array_equal((x * 2).numpy(), [0, 2, 4, 6])


# ---- PyTorch checkpoints --------------------------------------------------------------------------------------------
def _torch_checkpoint() -> dict[str, torch.Tensor]:
    """A torch model's state dict plus the layouts torch_load must honour."""
    torch.manual_seed(0)
    sd: dict[str, torch.Tensor] = dict(_trained_torch_block().state_dict())
    base = torch.arange(24.0).reshape(4, 6)
    sd["transposed"] = base.t()  # strides (1, 6)
    sd["offset_view"] = base[1:3]  # shares base's storage, with an offset
    sd["gapped"] = base[:, ::2]  # strides (6, 2): no movement-op view, gathered on load
    sd["expanded"] = torch.arange(3.0).reshape(3, 1).expand(3, 4)  # stride 0
    sd["permuted"] = torch.arange(24).reshape(2, 3, 4).permute(2, 0, 1)
    sd["half"] = torch.randn(5).half()
    sd["bf16"] = torch.randn(2, 3).to(torch.bfloat16)
    sd["flags"] = torch.tensor([True, False, True])
    sd["u16"] = torch.arange(5).to(torch.uint16)  # saved as an untyped storage + dtype (_rebuild_tensor_v3)
    sd["param"] = torch.nn.Parameter(torch.ones(2))
    sd["empty"] = torch.zeros(0, 3)
    sd["scalar"] = torch.tensor(3.5)
    return sd


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_torch_load_matches_torch(tmp_path: Path, zip_format: bool) -> None:
    sd = _torch_checkpoint()
    path = tmp_path / "model.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=zip_format)
    loaded = torch_load(path)
    assert list(loaded) == list(sd)
    for k, v in sd.items():
        assert loaded[k].shape == tuple(v.shape), k
        assert loaded[k].dtype.name == str(v.dtype).removeprefix("torch."), k
        np.testing.assert_array_equal(loaded[k].numpy(), _as_numpy(v.detach()), err_msg=k)


def test_torch_load_shares_storage_and_loads_into_a_model(tmp_path: Path) -> None:
    ref = _trained_torch_block()
    sd = ref.state_dict()
    sd["alias"] = sd["layers.0.weight"]
    torch.save({"model": sd, "epoch": 3}, tmp_path / "ckpt.pth")
    ckpt = torch_load(tmp_path / "ckpt.pth")
    assert ckpt["epoch"] == 3
    state = ckpt["model"]
    assert state["alias"].inputs == state["layers.0.weight"].inputs  # one Buffer, as in torch
    model = Block()
    load_state_dict(model, state, strict=False)
    x = np.random.default_rng(2).standard_normal((3, 2, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(model(Tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5,
                               rtol=1e-5)


def test_torch_load_any_top_folder_name(tmp_path: Path) -> None:
    path = tmp_path / "weird name.pt"
    torch.save({"w": torch.arange(3.0)}, path)
    np.testing.assert_array_equal(torch_load(path)["w"].numpy(), [0, 1, 2])


def test_torch_load_is_lazy(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(1000), "t": torch.ones(20, 50).t()}, tmp_path / "m.pt")
    state = torch_load(tmp_path / "m.pt")
    assert not any(buf.allocated for t in state.values() for buf in t.inputs)


class BadLayout:
    """Pickles as a tensor whose size reads past the end of its (3-element) storage."""

    def __reduce__(self) -> tuple[Any, ...]:
        storage = torch.ones(3).untyped_storage()
        typed = torch.storage.TypedStorage(  # type: ignore[no-untyped-call]
            wrap_storage=storage, dtype=torch.float32, _internal=True)
        return (torch._utils._rebuild_tensor_v2, (typed, 1, (10,), (1,), False, OrderedDict()))


def test_torch_load_rejects_layouts_outside_the_storage(tmp_path: Path) -> None:
    torch.save({"bad": BadLayout()}, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=r"reads element 10 of storage '0', which has 3"):
        torch_load(tmp_path / "bad.pt")


def test_torch_load_big_endian_zip(tmp_path: Path) -> None:
    """A checkpoint written on a big-endian machine (byteorder "big"): rebuilt here from a little-endian one."""
    values = torch.arange(6.0).reshape(2, 3)
    torch.save({"w": values.t()}, tmp_path / "little.pt")
    with zipfile.ZipFile(tmp_path / "little.pt") as src, zipfile.ZipFile(tmp_path / "big.pt", "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/byteorder"):
                data = b"big"
            elif "/data/" in info.filename:
                data = np.frombuffer(data, np.float32).astype(">f4").tobytes()
            dst.writestr(info.filename, data)
    np.testing.assert_array_equal(torch_load(tmp_path / "big.pt")["w"].numpy(), values.t().numpy())


class Evil:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {EVIL_MARKER}",))


EVIL_MARKER = Path("/tmp/plygrad-torch-load-evil-marker")


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_torch_load_refuses_code_in_the_pickle(tmp_path: Path, zip_format: bool) -> None:
    EVIL_MARKER.unlink(missing_ok=True)
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "boom": Evil()}, path, _use_new_zipfile_serialization=zip_format)
    with pytest.raises(CheckpointError, match=r"asks to load (posix|os)\.system"):
        torch_load(path)
    assert not EVIL_MARKER.exists()
    path.write_bytes(pickle.dumps(Evil()))  # a bare pickle is refused at its first global too
    with pytest.raises(ValueError, match="system"):
        torch_load(path)
    assert not EVIL_MARKER.exists()


@pytest.mark.parametrize("content", [b"", b"garbage", pickle.dumps([1, 2]), pickle.dumps(12345)],
                         ids=["empty", "garbage", "other pickle", "wrong magic"])
def test_torch_load_rejects_non_checkpoints(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=str(path)):
        torch_load(path)


def test_torch_load_rejects_truncated_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    torch.save({"w": torch.ones(1000)}, path, _use_new_zipfile_serialization=False)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match="truncated"):
        torch_load(path)
    torch.save({"w": torch.ones(1000)}, path)
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(ValueError, match=str(path)):
        torch_load(path)


def test_torch_load_never_imports_torch(tmp_path: Path) -> None:
    torch.save(_torch_checkpoint(), tmp_path / "m.pt")
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked in this test")
        sys.meta_path.insert(0, Block())
        from plygrad.frontend.nn.state import torch_load
        state = torch_load({str(tmp_path / "m.pt")!r})
        assert state["transposed"].numpy()[1, 0] == 1.0
        assert not [m for m in sys.modules if m == "torch" or m.startswith("torch.")]
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.stdout.strip() == "ok", result.stderr


# ---- checkpoints that claim more than they hold ---------------------------------------------------------------------
_BOMB_BYTES = 200 << 20  # what the crafted entry inflates to; its tensor needs 16 bytes
_SMALL_PEAK = 16 << 20


def _recompressed(src: Path, dst: Path, data_entry: bytes | None = None) -> None:
    """`src` rewritten with every entry ZIP_DEFLATED; the storage entry replaced by `data_entry` zeros if given
    (streamed, so the test itself never holds them)."""
    with zipfile.ZipFile(src) as s, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as d:
        for info in s.infolist():
            if "/data/" in info.filename and data_entry is not None:
                with d.open(info.filename, "w") as f:
                    for _ in range(len(data_entry) // (1 << 20)):
                        f.write(data_entry[:1 << 20])
                continue
            d.writestr(info.filename, s.read(info))


def _patch_sizes(path: Path, entry: str, *, uncompressed: int | None = None, compressed: int | None = None) -> None:
    """Make the zip's local header and central directory lie about `entry`'s sizes (a crafted file)."""
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        offset = z.getinfo(entry).header_offset
    central = struct.unpack_from("<I", raw, raw.rindex(b"PK\x05\x06") + 16)[0]  # the central directory's offset
    while raw[central + 46:central + 46 + len(entry)] != entry.encode():
        central = raw.index(b"PK\x01\x02", central + 4)
    for value, local_at, central_at in ((compressed, 18, 20), (uncompressed, 22, 24)):
        if value is not None:
            struct.pack_into("<I", raw, offset + local_at, value)
            struct.pack_into("<I", raw, central + central_at, value)
    path.write_bytes(raw)


def _peak_while(action: Any) -> tuple[BaseException | None, int]:
    """(what `action()` raised, the peak bytes Python allocated meanwhile)."""
    tracemalloc.start()
    try:
        action()
        raised: BaseException | None = None
    except Exception as e:
        raised = e
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return raised, peak


@pytest.fixture(scope="module")
def zip_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of one 4-element float32 tensor whose (deflated, ~200 KB) data entry inflates to 200 MB."""
    folder = tmp_path_factory.mktemp("bomb")
    torch.save({"w": torch.ones(4)}, folder / "small.pt")
    _recompressed(folder / "small.pt", folder / "bomb.pt", bytes(_BOMB_BYTES))
    return folder / "bomb.pt"


@pytest.mark.parametrize("sizes", ["honest", "lying"])
def test_torch_load_refuses_a_zip_bomb_without_inflating_it(zip_bomb: Path, tmp_path: Path, sizes: str) -> None:
    """The entry's size fields either say 200 MB (refused from the directory alone) or lie and say 16 bytes
    (inflation stops at 16 bytes and the CRC check fails): either way a clear error, never 200 MB in memory."""
    path = tmp_path / "bomb.pt"
    path.write_bytes(zip_bomb.read_bytes())
    assert path.stat().st_size < _BOMB_BYTES // 100
    if sizes == "lying":
        _patch_sizes(path, "small/data/0", uncompressed=16)
    raised, peak = _peak_while(lambda: torch_load(path))
    assert isinstance(raised, CheckpointError), raised
    expected = "holds 209715200 bytes but the pickle declares 4 float32 elements, which are 16 bytes" \
        if sizes == "honest" else "CRC"
    assert expected in str(raised) and str(path) in str(raised)
    assert peak < _SMALL_PEAK, f"torch_load allocated {peak} bytes for a 16-byte tensor"


def test_torch_load_refuses_declared_bytes_deflate_cannot_produce(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(1 << 16)}, tmp_path / "plain.pt")
    path = tmp_path / "deflated.pt"
    _recompressed(tmp_path / "plain.pt", path)
    _patch_sizes(path, "plain/data/0", compressed=8)
    raised, peak = _peak_while(lambda: torch_load(path))
    assert isinstance(raised, CheckpointError)
    assert "declares 262144 bytes, but its 8 compressed bytes can expand to at most" in str(raised)
    assert peak < _SMALL_PEAK


def test_torch_load_reads_compressed_checkpoints(tmp_path: Path) -> None:
    """A checkpoint rezipped with deflate (torch.save stores entries uncompressed) loads through the bounded reader."""
    sd = _torch_checkpoint()
    torch.save(sd, tmp_path / "model.pt")
    _recompressed(tmp_path / "model.pt", tmp_path / "deflated.pt")
    with zipfile.ZipFile(tmp_path / "deflated.pt") as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    loaded = torch_load(tmp_path / "deflated.pt")
    for k, v in sd.items():
        np.testing.assert_array_equal(loaded[k].numpy(), _as_numpy(v.detach()), err_msg=k)


class _ClaimedStorage:
    """A storage a crafted legacy pickle refers to, declaring `numel` float32 elements."""

    def __init__(self, numel: int) -> None:
        self.numel = numel


class _ClaimedTensor:
    def __init__(self, storage: _ClaimedStorage) -> None:
        self.storage = storage

    def __reduce__(self) -> tuple[Any, ...]:
        return (torch._utils._rebuild_tensor_v2, (self.storage, 0, (4,), (1,), False, OrderedDict()))


class _LegacyPickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _ClaimedStorage):
            return ("storage", torch.FloatStorage, "0", "cpu", obj.numel, None)
        return None


def _legacy_checkpoint(declared: int, stored_count: int, payload: bytes) -> bytes:
    """The pre-1.6 torch.save layout, written by hand so the pickle and the data can disagree."""
    obj = io.BytesIO()
    _LegacyPickler(obj, protocol=2).dump({"w": _ClaimedTensor(_ClaimedStorage(declared))})
    head = b"".join(pickle.dumps(x, protocol=2) for x in
                    (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}))
    return head + obj.getvalue() + pickle.dumps(["0"], protocol=2) + struct.pack("<q", stored_count) + payload


def test_legacy_checkpoint_written_by_hand_loads(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    path.write_bytes(_legacy_checkpoint(4, 4, np.arange(4, dtype=np.float32).tobytes()))
    np.testing.assert_array_equal(torch_load(path)["w"].numpy(), np.arange(4, dtype=np.float32))
    assert torch.load(path, weights_only=True)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]  # the layout is torch's


@pytest.mark.parametrize(("declared", "stored", "message"), [
    (2**40, 2**40, r"declares 1099511627776 float32 elements \(4398046511104 bytes\) but only 16 bytes are left"),
    (4, 2**40, "stored with 1099511627776 elements where the pickle declares 4"),
], ids=["pickle and data claim a terabyte", "data claims more than the pickle"])
def test_legacy_checkpoint_claiming_too_many_elements(tmp_path: Path, declared: int, stored: int,
                                                      message: str) -> None:
    path = tmp_path / "legacy.pt"
    path.write_bytes(_legacy_checkpoint(declared, stored, bytes(16)))
    raised, peak = _peak_while(lambda: torch_load(path))
    assert isinstance(raised, CheckpointError)
    assert re.search(message, str(raised)) and str(path) in str(raised), raised
    assert peak < _SMALL_PEAK
