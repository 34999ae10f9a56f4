"""The CPU backend through the plugin API: target, compiler, loading and calling hand-written C programs."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from cpu_programs import ADD, BROKEN, ECHO, PREFIX_SUM, REVERSED_SUM, THREAD_IDS, WINDOW_SUM

from plygrad.backends.cpu.backend import CPUBackend, cpu_target
from plygrad.backends.cpu.compiler import (
    TOOLCHAIN_FOLDER,
    compiler_candidates,
    find_compiler_command,
    host_cpu,
    pick_toolchain,
    probe_toolchain,
    toolchain_key,
)
from plygrad.runtime import BackendError, CompileError, Device
from plygrad.runtime.cache import PROGRAMS


@pytest.fixture(scope="module")
def cpu() -> CPUBackend:
    backend = Device["CPU"]
    assert isinstance(backend, CPUBackend)
    return backend


def _handle(cpu: CPUBackend, data: np.ndarray) -> object:
    handle = cpu.allocator.alloc(data.nbytes)
    cpu.allocator.copyin(handle, memoryview(data.tobytes()))
    return handle


def _read(cpu: CPUBackend, handle: object, dtype: type, count: int) -> np.ndarray:
    out = bytearray(count * np.dtype(dtype).itemsize)
    cpu.allocator.copyout(memoryview(out), handle)
    return np.frombuffer(out, dtype=dtype)


def test_target_describes_this_machine(cpu: CPUBackend) -> None:
    target = cpu.target
    assert (target.device, target.renderer, target.has_local) == ("CPU", "c", False)
    assert target.threads == (os.cpu_count() or 1) and target.arch
    assert target == cpu_target()


def test_entry_point_is_registered() -> None:
    record = Device.records()["CPU"]
    assert record.entry_point == "plygrad.backends.cpu.descriptor:DESCRIPTOR" and record.usable


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_add_program_matches_numpy(cpu: CPUBackend, n: int) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    program = cpu.load("add", cpu.compiler.compile(ADD))
    out = cpu.allocator.alloc(4 * n)
    assert program([out, _handle(cpu, a), _handle(cpu, b)], (1, 1, 1), None, [n]) is None
    np.testing.assert_array_equal(_read(cpu, out, np.float32, n), a + b)


def test_loading_writes_no_second_copy_of_the_library(cpu: CPUBackend, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """compile() returns bytes; load() hands them to dlopen through an in-memory file where the OS has one, so the
    library is written to disk once (by the compiler), not again to load it (issue 8's plugin-API item)."""
    binary = cpu.compiler.compile(ADD)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    program = cpu.load("add", binary)
    if sys.platform.startswith("linux") and hasattr(os, "memfd_create"):
        assert not list(tmp_path.iterdir())
    a = np.arange(5, dtype=np.float32)
    out = cpu.allocator.alloc(20)
    program([out, _handle(cpu, a), _handle(cpu, a)], (1, 1, 1), None, [5])
    np.testing.assert_array_equal(_read(cpu, out, np.float32, 5), 2 * a)
    assert not list(tmp_path.iterdir())


def test_selects_in_a_vectorized_loop_compile_correctly(cpu: CPUBackend) -> None:
    """A miscompile seen with GCC 12 on AVX-512 hosts (see OPTIONAL_FLAGS in the compiler module)."""
    program = cpu.load("prefix_sum", cpu.compiler.compile(PREFIX_SUM))
    out = cpu.allocator.alloc(16)
    program([out, _handle(cpu, np.array([1, 2, 3, 4], np.float32))], (1, 1, 1), None, [])
    np.testing.assert_array_equal(_read(cpu, out, np.float32, 4), [1, 3, 6, 10])


def test_guarded_loads_in_a_vectorized_loop_compile_correctly(cpu: CPUBackend) -> None:
    """The other GCC 12 miscompile OPTIONAL_FLAGS works around: a padded, dilated window sum (a small conv3d)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 1, 4, 4, 3)).astype(np.float32)
    w = rng.standard_normal((2, 2, 2)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 2, 3), axis=(2, 3, 4))[..., ::2, :, ::2]
    program = cpu.load("window_sum", cpu.compiler.compile(WINDOW_SUM))
    out = cpu.allocator.alloc(120 * 4)
    program([out, _handle(cpu, x), _handle(cpu, w)], (1, 1, 1), None, [])
    np.testing.assert_allclose(_read(cpu, out, np.float32, 120), (windows * w).sum((5, 6, 7)).ravel(), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("groups", [4, 64, 256])
def test_a_reduction_over_reversed_loads_compiles_correctly(cpu: CPUBackend, groups: int) -> None:
    """The third GCC 12 loop-vectorizer miscompile OPTIONAL_FLAGS works around: a float sum of a reversed vector
    unrolled by 4 (what `x.flip(0).sum()` renders)."""
    program = cpu.load("reversed_sum", cpu.compiler.compile(REVERSED_SUM))
    x = np.arange(4 * groups, dtype=np.float32)
    out = cpu.allocator.alloc(4)
    program([out, _handle(cpu, x)], (1, 1, 1), None, [groups])
    np.testing.assert_array_equal(_read(cpu, out, np.float32, 1), [x[::-1].sum(dtype=np.float32)])


@pytest.mark.parametrize("values", [(0, 1), ((1 << 40) + 5, -3), (-(1 << 63), (1 << 63) - 1)])
def test_variables_arrive_as_long_long_in_order(cpu: CPUBackend, values: tuple[int, int]) -> None:
    program = cpu.load("echo", cpu.compiler.compile(ECHO))
    out = cpu.allocator.alloc(16)
    program([out], (1, 1, 1), None, list(values))
    assert _read(cpu, out, np.int64, 2).tolist() == list(values)


def test_openmp_loop_uses_all_cores(cpu: CPUBackend) -> None:
    program = cpu.load("thread_ids", cpu.compiler.compile(THREAD_IDS))
    ids, roots = cpu.allocator.alloc(4 * 65536), cpu.allocator.alloc(4 * 65536)
    seconds = program([ids, roots], (1, 1, 1), None, [], wait=True)
    assert seconds is not None and seconds >= 0
    np.testing.assert_allclose(_read(cpu, roots, np.float32, 65536), np.sqrt(np.arange(65536, dtype=np.float32)),
                               rtol=1e-7)
    threads = set(_read(cpu, ids, np.int32, 65536).tolist())
    if "-fopenmp" in cpu.compiler.toolchain.flags and (os.cpu_count() or 1) > 1:  # type: ignore[attr-defined]
        assert len(threads) > 1, "the omp loop ran on one thread"


def test_compile_error_names_the_line(cpu: CPUBackend) -> None:
    with pytest.raises(CompileError, match="undeclared_name") as info:
        cpu.compiler.compile(BROKEN)
    assert info.value.line == BROKEN.splitlines().index("  data0[1] = undeclared_name * 2;") + 1
    assert info.value.source_line == "data0[1] = undeclared_name * 2;"
    assert "line" in str(info.value)


def test_cache_key_names_compiler_version_and_flags(cpu: CPUBackend) -> None:
    chain = probe_toolchain()
    key = cpu.compiler.cache_key
    assert chain.command[0] in key and chain.version in key and "-O2" in key and "-shared" in key
    if "-march=native" in chain.flags:
        assert host_cpu() in key, "a -march=native binary is only valid on this CPU"


def test_missing_function_is_a_clear_error(cpu: CPUBackend) -> None:
    with pytest.raises(BackendError, match="no function 'nope'"):
        cpu.load("nope", cpu.compiler.compile(ADD))


def test_cc_pointing_nowhere_is_a_backend_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc-that-is-not-there")
    with pytest.raises(BackendError, match="not an executable"):
        find_compiler_command()


def test_no_compiler_on_path_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BackendError, match="install gcc or clang"):
        find_compiler_command()


def test_cc_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "gcc -Wall")
    assert find_compiler_command()[1:] == ("-Wall",)


def _compiler_without_openmp(folder: Path, name: str, real: str) -> Path:
    """A compiler named `name` in `folder` that runs `real` but fails on -fopenmp, as clang without libomp does."""
    script = folder / name
    script.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && { echo "omp.h not found" >&2; exit 1; }; '
                      f'done\nexec {real} "$@"\n')
    script.chmod(0o755)
    return script


@pytest.mark.skipif(not (sys.platform.startswith("linux") and shutil.which("gcc")), reason="needs gcc and sh")
def test_a_compiler_without_openmp_loses_to_one_with_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # with `clang` on PATH but no libomp, every kernel ran on one core: the pick must go on to gcc
    gcc = shutil.which("gcc")
    assert gcc is not None
    _compiler_without_openmp(tmp_path, "clang", gcc)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    candidates = compiler_candidates()
    assert candidates[0] == (str(tmp_path / "clang"),)
    chain = pick_toolchain(candidates)
    assert "-fopenmp" in chain.flags and chain.command != candidates[0]
    assert cpu_target(chain).threads == (os.cpu_count() or 1)


@pytest.mark.skipif(not (sys.platform.startswith("linux") and shutil.which("gcc")), reason="needs gcc and sh")
def test_without_openmp_anywhere_the_first_compiler_is_kept_and_runs_one_thread(tmp_path: Path) -> None:
    gcc = shutil.which("gcc")
    assert gcc is not None
    first = _compiler_without_openmp(tmp_path, "cc-a", gcc)
    second = _compiler_without_openmp(tmp_path, "cc-b", gcc)
    chain = pick_toolchain([(str(first),), (str(second),)])
    assert chain.command == (str(first),) and "-fopenmp" not in chain.flags
    assert cpu_target(chain).threads == 1


def test_a_broken_first_compiler_is_skipped_and_none_working_names_the_first(tmp_path: Path) -> None:
    broken = tmp_path / "broken-cc"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(BackendError, match="broken-cc"):
        pick_toolchain([(str(broken),)])
    assert pick_toolchain([(str(broken),), probe_toolchain().command]).command == probe_toolchain().command


def test_the_probed_toolchain_is_kept_as_a_record_and_a_bad_record_is_probed_again(tmp_path: Path) -> None:
    # the autouse fixture gives this test an empty program cache; probing again must write the record there
    probed = probe_toolchain()
    key = toolchain_key(compiler_candidates())
    assert PROGRAMS.read_record(TOOLCHAIN_FOLDER, key) is None
    assert probe_toolchain.__wrapped__() == probed
    assert json.loads(PROGRAMS.read_record(TOOLCHAIN_FOLDER, key) or b"")["flags"] == list(probed.flags)
    assert probe_toolchain.__wrapped__() == probed  # read back
    forged = {"command": ["/bin/sh"], "version": "x", "flags": list(probed.flags)}  # not a candidate
    for bad in (b"not json", json.dumps(forged).encode(), json.dumps({"command": list(probed.command)}).encode()):
        PROGRAMS.write_record(TOOLCHAIN_FOLDER, key, bad)
        assert probe_toolchain.__wrapped__() == probed
        assert PROGRAMS.read_record(TOOLCHAIN_FOLDER, key) != bad


def test_a_changed_compiler_file_changes_the_toolchain_key(tmp_path: Path) -> None:
    fake = _compiler_without_openmp(tmp_path, "cc-x", "/bin/true")
    before = toolchain_key([(str(fake),)])
    fake.write_text(fake.read_text() + "# upgraded\n")
    assert toolchain_key([(str(fake),)]) != before


@pytest.mark.parametrize(("global_size", "local_size"), [((4, 1, 1), None), ((1, 1, 1), (8, 1, 1))])
def test_gpu_style_launch_sizes_are_refused(cpu: CPUBackend, global_size: tuple[int, int, int],
                                            local_size: tuple[int, int, int] | None) -> None:
    program = cpu.load("add", cpu.compiler.compile(ADD))
    out = cpu.allocator.alloc(0)
    with pytest.raises(BackendError, match=r"global \(1, 1, 1\) and local None"):
        program([out, out, out], global_size, local_size, [0])


def test_synchronize_returns(cpu: CPUBackend) -> None:
    cpu.synchronize()
    cpu.synchronize()
