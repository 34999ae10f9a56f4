"""What the CPU backend tells codegen about this machine: its vector registers, its data caches and its FMA.

`Target.vector_widths` is one register of the widest vector unit the compiled code may use (AVX-512F, AVX or SSE2
on x86-64 under `-march=native`, else 16 bytes), `Target.cache_sizes` the data caches of CPU 0 from Linux's sysfs
(DEFAULT_CACHE_SIZES where that is missing), and `Target.has_fma` whether compiled code has a fused multiply-add.
All are read from files, never from a subprocess, so opening the backend stays cheap. docs/backends.md ("CPU").
"""

from __future__ import annotations

import functools
import platform
import re
from pathlib import Path
from typing import Final

from plygrad.ir import DType, dtypes

CACHE_DIR: Final = Path("/sys/devices/system/cpu/cpu0/cache")
DEFAULT_CACHE_SIZES: Final = (32 * 1024, 1024 * 1024)
_SIZE: Final = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$", re.IGNORECASE)
_UNIT: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# dtypes whose vector ops codegen emits (plygrad.codegen.vectorize.VECTOR_DTYPES): exact IEEE ops in vectors
_VECTOR_DTYPES: Final = (dtypes.float32, dtypes.float64)


def parse_cache_size(text: str) -> int | None:
    """Bytes of a sysfs cache `size` file ("48K", "2048K", "260M"), None if unreadable."""
    match = _SIZE.match(text)
    if match is None:
        return None
    size = int(match.group(1)) * _UNIT[match.group(2).upper()]
    return size if size > 0 else None


def read_cache_sizes(folder: Path = CACHE_DIR) -> tuple[int, ...]:
    """The data-cache sizes of one core, innermost level first, from a sysfs cache folder; () if it has none."""
    levels: dict[int, int] = {}
    try:
        entries = sorted(folder.glob("index*"))
    except OSError:
        return ()
    for entry in entries:
        try:
            kind = (entry / "type").read_text().strip()
            level = int((entry / "level").read_text().strip())
            size = parse_cache_size((entry / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size is not None:
            levels[level] = max(size, levels.get(level, 0))
    return tuple(levels[level] for level in sorted(levels))


@functools.cache
def host_cache_sizes() -> tuple[int, ...]:
    """This machine's data-cache sizes (sysfs), or DEFAULT_CACHE_SIZES where they cannot be read."""
    return read_cache_sizes() or DEFAULT_CACHE_SIZES


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in a /proc/cpuinfo text (x86 `flags`, Arm `Features`)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@functools.cache
def host_cpu_flags() -> frozenset[str]:
    try:
        return cpu_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return frozenset()


def vector_bytes(machine: str, flags: frozenset[str], native: bool) -> int:
    """Bytes of the widest vector register compiled code uses: see docs/backends.md ("CPU")."""
    if machine.lower() in ("x86_64", "amd64") and native:
        if "avx512f" in flags:
            return 64
        if "avx" in flags:
            return 32
    return 16


def vector_widths(nbytes: int) -> tuple[tuple[DType, tuple[int, ...]], ...]:
    """Target.vector_widths for registers of `nbytes` bytes: every power of two from 2 lanes up to a full register,
    for each dtype with exact vector ops (the narrower ones serve axes the widest does not divide)."""
    return tuple((dt, tuple(2**k for k in range(1, 8) if 2**k * dt.itemsize <= nbytes)) for dt in _VECTOR_DTYPES)


def host_vector_widths(native: bool) -> tuple[tuple[DType, tuple[int, ...]], ...]:
    """Target.vector_widths of this machine, for code compiled with (`native`) or without `-march=native`."""
    return vector_widths(vector_bytes(platform.machine(), host_cpu_flags(), native))


def has_fma(machine: str, flags: frozenset[str], native: bool) -> bool:
    """Whether compiled code has a fused multiply-add instruction (Target.has_fma): every 64-bit Arm core; an x86-64
    core with the `fma` flag, used only when the compiler targets the host (`-march=native`); without it `fmaf`
    is a libm call, correct but far slower than a multiply and an add."""
    if machine.lower() in ("aarch64", "arm64"):
        return True
    return machine.lower() in ("x86_64", "amd64") and native and "fma" in flags


def host_has_fma(native: bool) -> bool:
    """Target.has_fma of this machine, for code compiled with (`native`) or without `-march=native`."""
    return has_fma(platform.machine(), host_cpu_flags(), native)
