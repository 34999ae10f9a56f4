"""plygrad-metal end to end on Linux: `Device["METAL"]` opened on a stand-in Objective-C runtime whose GPU runs every
dispatched kernel through the CPU emulation of Metal, then plygrad.runtime's conformance suite (allocator, compile
errors, kernels through codegen, and the IR-semantics checks: NaN, no FMA, half rounding, division, shifts, casts)
and a few frontend ops against it.

Each piece is the real one but the GPU: the runtime lowers with the backend's Target, codegen's metal renderer writes
the MSL, MetalCompiler and MetalBackend make libraries, pipelines and launches through MetalDevice's Objective-C
messages, which packages/runtime-metal/tests/fake_objc.py answers as Metal would (checking Cocoa's rules); a
committed command buffer runs each kernel with packages/codegen/tests/metal_emu.h on the MTLBuffers' own bytes,
and every library is first compiled by clang against metal_syntax.h (a syntax error is the compile error Metal
would report). What it cannot show is what only a Mac shows: Apple's compiler and GPU (docs/backends.md, Metal).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from plygrad.runtime import Device, testing
from plygrad.runtime.testing import BackendConformance

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT / "packages" / "codegen" / "tests", ROOT / "packages" / "runtime-metal" / "tests"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from fake_objc import FakeObjC  # noqa: E402  (the folders above go on sys.path first)
from metal_emu import EmulationError, MetalEmuLibrary, MetalKernel, check_syntax, lint  # noqa: E402

from plygrad.frontend import Tensor, dtypes  # noqa: E402
from plygrad.ir import ParamInfo, ProgramInfo  # noqa: E402
from plygrad.ir import dtypes as ir_dtypes  # noqa: E402

# a parameter or variable in the signature (`[[buffer(k)]]`) or in the argument struct (`;`)
_PARAM = re.compile(r"(const )?device (\w+)\* data(\d+)(?: \[\[buffer\(\d+\)\]\]|;)")
_VARIABLE = re.compile(r"(?:constant long& (\w+) \[\[buffer\(\d+\)\]\]|^  long (\w+);$)", re.M)
# what a buffer of each Metal element type holds; the emulation only needs the width (bfloat16 is ushort bits too)
_ELEMENTS = {"bool": ir_dtypes.bool, "char": ir_dtypes.int8, "uchar": ir_dtypes.uint8, "short": ir_dtypes.int16,
             "ushort": ir_dtypes.uint16, "half": ir_dtypes.float16, "int": ir_dtypes.int32, "uint": ir_dtypes.uint32,
             "float": ir_dtypes.float32, "long": ir_dtypes.int64, "ulong": ir_dtypes.uint64}


class EmulatedGPU:
    """The stand-in GPU: compiles a library with the syntax check, runs a dispatch through the emulation."""

    def __init__(self) -> None:
        self.libraries: dict[tuple[str, tuple[int, ...]], tuple[MetalKernel, MetalEmuLibrary]] = {}
        self.launches = 0

    @staticmethod
    def _kernel(name: str, source: str, sizes: list[int] | None = None) -> MetalKernel:
        """The record the emulation needs, read from the frame: the parameters (their sizes from the buffers bound)
        and the variables, from the signature or from the argument struct before it."""
        start = source.find("kernel void")
        frame = source[:source.find("{\n", start)] if start >= 0 else source
        found = _PARAM.findall(frame)
        sizes = sizes or [0] * len(found)
        params = tuple(ParamInfo(int(index), _ELEMENTS[element], sizes[slot] // _ELEMENTS[element].itemsize,
                                 not const) for slot, (const, element, index) in enumerate(found))
        variables = tuple(a or b for a, b in _VARIABLE.findall(frame))
        return MetalKernel(source, ProgramInfo(name, (1, 1, 1), (1, 1, 1), params), variables)

    def compile_check(self, source: str) -> str | None:
        """None, or a log in Metal's format (`program_source:LINE:COL: error: ...`) for a source clang rejects."""
        name = next(iter(re.findall(r"^kernel void (\w+)\(", source, re.M)), "")
        kernel = self._kernel(name, source)
        problems = lint(kernel) if name else [f"program_source:1:1: error: no kernel function in {source[:40]!r}"]
        if not problems:
            try:
                check_syntax([kernel])
            except EmulationError as exc:
                problems = [str(exc)]
        if not problems:
            return None
        line = next((int(m) for m in re.findall(r"line (\d+)", "\n".join(problems))), 1)
        return f"program_source:{line}:1: error: " + "\n".join(problems)

    def run(self, name: str, source: str, buffers: list[memoryview], values: list[bytes],
            groups: tuple[int, int, int], threads: tuple[int, int, int]) -> None:
        sizes = [len(b) for b in buffers]
        key = (source, tuple(sizes))  # a kernel's record holds its buffers' sizes, its unit text does not
        if key not in self.libraries:
            kernel = self._kernel(name, source, sizes)
            self.libraries[key] = (kernel, MetalEmuLibrary([kernel]))  # g++ builds are cached by text
        kernel, library = self.libraries[key]
        arrays = [np.frombuffer(view[:param.size * param.dtype.itemsize], dtype=np.dtype(f"u{param.dtype.itemsize}"))
                  for view, param in zip(buffers, kernel.info.params, strict=True)]  # a 0-byte buffer is 1 byte
        if kernel.argument_struct:  # one struct of GPU addresses then values; the fake hands the buffers in order
            (packed,) = values
            values = [packed[i:i + 8] for i in range(8 * len(kernel.info.params), len(packed), 8)]
        variables = {var: int.from_bytes(value, "little", signed=True)
                     for var, value in zip(kernel.var_names, values, strict=True)}
        library.run(kernel, arrays, variables, grid=groups, block=threads)
        self.launches += 1


@pytest.fixture(autouse=True)
def emulated_metal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatedGPU]:
    """METAL opens on every OS here: its Objective-C runtime is the stand-in with an emulated GPU."""
    import plygrad.backends.metal.backend as metal_backend

    gpu = EmulatedGPU()
    monkeypatch.setattr(metal_backend, "load_objc", lambda: FakeObjC(runner=gpu.run,
                                                                     compile_check=gpu.compile_check))
    with testing.isolated_runtime(tmp_path / "cache"):
        yield gpu


class TestEmulatedMetalConformance(BackendConformance):
    device = "METAL"

    def test_nan_and_inf_in_float64(self) -> None:
        """Not a skip here: METAL's Target must say it has no float64 (so the suite's float64 checks do not apply)."""
        assert ir_dtypes.float64 not in Device["METAL"].target.supported_dtypes


def test_frontend_ops_run_on_the_emulated_metal_device(emulated_metal: EmulatedGPU) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((33, 300)).astype(np.float32)
    w = rng.standard_normal((300, 20)).astype(np.float32)
    a, b = Tensor(x, device="METAL"), Tensor(w, device="METAL")
    np.testing.assert_allclose((a @ b).relu().sum(1).numpy(), np.maximum(x @ w, 0).sum(1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(a.max(0).numpy(), x.max(0))
    soft = (a.exp() / a.exp().sum(1, keepdim=True)).numpy()
    np.testing.assert_allclose(soft, np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    half = a.cast(dtypes.float16).mean(1).numpy()
    np.testing.assert_allclose(half.astype(np.float32), x.astype(np.float16).astype(np.float32).mean(1), atol=2e-3)
    assert emulated_metal.launches > 0


def test_float64_on_metal_fails_naming_the_dtype_and_device() -> None:
    with pytest.raises(Exception, match=r"float64.*METAL/metal does not support"):
        (Tensor(np.ones(4), device="METAL") + 1).numpy()


def test_a_cat_of_many_tensors_passes_an_argument_struct(emulated_metal: EmulatedGPU) -> None:
    """40 inputs of one kernel: more than Metal's 31 bindings, so one struct of GPU addresses."""
    parts = [np.full((2, 3), k, np.float32) for k in range(40)]
    got = Tensor.cat(*[Tensor(p, device="METAL") for p in parts]).numpy()
    np.testing.assert_array_equal(got, np.concatenate(parts))
    assert any("plygrad_args" in source for source, _ in emulated_metal.libraries)
