"""What the CPU backend reads about its host (host.py): cache sizes from a sysfs folder, vector registers and the
fused multiply-add from the CPU's flags, and the Target built from them."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from plygrad.backends.cpu.backend import cpu_target
from plygrad.backends.cpu.compiler import Toolchain, probe_toolchain
from plygrad.backends.cpu.host import (
    DEFAULT_CACHE_SIZES,
    cpu_flags,
    has_fma,
    host_cache_sizes,
    host_cpu_flags,
    parse_cache_size,
    read_cache_sizes,
    vector_bytes,
    vector_widths,
)
from plygrad.ir import dtypes


@pytest.mark.parametrize(("text", "size"), [("48K\n", 48 << 10), ("2048K", 2 << 20), ("260M", 260 << 20),
                                             ("1G", 1 << 30), ("512", 512), ("", None), ("12Q", None),
                                             ("0K", None)])
def test_parse_cache_size(text: str, size: int | None) -> None:
    assert parse_cache_size(text) == size


def _cache(folder: Path, index: int, level: int, kind: str, size: str) -> None:
    entry = folder / f"index{index}"
    entry.mkdir()
    (entry / "level").write_text(f"{level}\n")
    (entry / "type").write_text(f"{kind}\n")
    (entry / "size").write_text(f"{size}\n")


def test_read_cache_sizes_keeps_data_and_unified_levels_in_order(tmp_path: Path) -> None:
    _cache(tmp_path, 0, 1, "Data", "48K")
    _cache(tmp_path, 1, 1, "Instruction", "32K")
    _cache(tmp_path, 2, 3, "Unified", "266240K")
    _cache(tmp_path, 3, 2, "Unified", "2048K")
    assert read_cache_sizes(tmp_path) == (48 << 10, 2 << 20, 266240 << 10)


def test_read_cache_sizes_skips_unreadable_entries(tmp_path: Path) -> None:
    _cache(tmp_path, 0, 1, "Data", "32K")
    (tmp_path / "index1").mkdir()  # no files at all
    _cache(tmp_path, 2, 2, "Unified", "garbage")
    assert read_cache_sizes(tmp_path) == (32 << 10,)
    assert read_cache_sizes(tmp_path / "missing") == ()


def test_this_host_has_cache_sizes() -> None:
    sizes = host_cache_sizes()
    assert sizes and all(s > 0 for s in sizes)
    if not Path("/sys/devices/system/cpu/cpu0/cache").is_dir():
        assert sizes == DEFAULT_CACHE_SIZES


def test_cpu_flags_of_x86_and_arm_cpuinfo() -> None:
    assert "avx512f" in cpu_flags("processor : 0\nflags\t\t: fpu sse2 avx avx2 avx512f\n\nflags : other\n")
    assert cpu_flags("Features\t: fp asimd evtstrm\n") == frozenset({"fp", "asimd", "evtstrm"})
    assert cpu_flags("model name : something\n") == frozenset()


@pytest.mark.parametrize(("machine", "flags", "native", "nbytes"), [
    ("x86_64", {"avx", "avx2", "avx512f"}, True, 64), ("x86_64", {"avx", "avx2"}, True, 32),
    ("x86_64", {"sse2"}, True, 16), ("x86_64", {"avx512f"}, False, 16), ("aarch64", {"asimd"}, True, 16),
    ("AMD64", {"avx"}, True, 32),
])
def test_vector_bytes(machine: str, flags: set[str], native: bool, nbytes: int) -> None:
    assert vector_bytes(machine, frozenset(flags), native) == nbytes


def test_vector_widths_fill_one_register() -> None:
    assert vector_widths(64) == ((dtypes.float32, (2, 4, 8, 16)), (dtypes.float64, (2, 4, 8)))
    assert vector_widths(16) == ((dtypes.float32, (2, 4)), (dtypes.float64, (2,)))


def test_cpu_target_follows_the_toolchain() -> None:
    chain = probe_toolchain()
    target = cpu_target(chain)
    assert target.threads == (os.cpu_count() or 1) and target.cache_sizes == host_cache_sizes()
    baseline = cpu_target(Toolchain(chain.command, chain.version, tuple(f for f in chain.flags
                                                                        if f != "-march=native")))
    assert baseline.vector_widths_for(dtypes.float32) == (2, 4)  # without -march=native: 16-byte registers
    assert max(target.vector_widths_for(dtypes.float32)) >= 4


@pytest.mark.parametrize(("machine", "flags", "native", "fma"), [
    ("x86_64", {"avx2", "fma"}, True, True), ("x86_64", {"avx2", "fma"}, False, False),
    ("x86_64", {"avx"}, True, False), ("aarch64", {"asimd"}, False, True), ("arm64", set(), True, True),
    ("riscv64", {"fma"}, True, False),
])
def test_has_fma(machine: str, flags: set[str], native: bool, fma: bool) -> None:
    """x86 has the instruction only with the `fma` flag and compiled code uses it only with -march=native; every
    64-bit Arm core has it."""
    assert has_fma(machine, frozenset(flags), native) is fma


def test_cpu_target_has_fma_where_the_compiled_code_has_it() -> None:
    chain = probe_toolchain()
    native = "-march=native" in chain.flags
    assert cpu_target(chain).has_fma is has_fma(platform.machine(), host_cpu_flags(), native)
    without = Toolchain(chain.command, chain.version, tuple(f for f in chain.flags if f != "-march=native"))
    assert cpu_target(without).has_fma is (platform.machine().lower() in ("aarch64", "arm64"))
