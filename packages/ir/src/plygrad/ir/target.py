"""`Target`: what codegen needs to know about a backend's code target, as a frozen, serializable record."""

from __future__ import annotations

from dataclasses import dataclass, field

from plygrad.ir.dtype import DType, DTypeKind, PtrDType, dtypes
from plygrad.ir.records import record


@record("TensorCore")
@dataclass(frozen=True)
class TensorCore:
    """One matrix-multiply-accumulate shape a target runs natively: D[M,N] = A[M,K] @ B[K,N] + C[M,N]."""

    dims: tuple[int, int, int]  # (M, N, K)
    dtype_in: DType
    dtype_out: DType
    threads: int  # threads of a group that cooperate on one tile

    def __post_init__(self) -> None:
        if len(self.dims) != 3 or any(type(d) is not int or d <= 0 for d in self.dims):
            raise ValueError(f"TensorCore.dims must be three positive ints (M, N, K), got {self.dims!r}")
        if type(self.threads) is not int or self.threads <= 0:
            raise ValueError(f"TensorCore.threads must be a positive int, got {self.threads!r}")
        for name in ("dtype_in", "dtype_out"):
            if not isinstance(getattr(self, name), DType):
                raise ValueError(f"TensorCore.{name} must be a DType, got {getattr(self, name)!r}")


def _is_value_dtype(dt: object) -> bool:
    """A scalar dtype that holds values: not a pointer, a vector, void or the abstract index type."""
    return (isinstance(dt, DType) and not isinstance(dt, PtrDType) and dt.count == 1
            and dt.kind not in (DTypeKind.VOID, DTypeKind.INDEX))


def _widths_up_to(nbytes: int, dtype: DType) -> tuple[int, ...]:
    """The power-of-two vector widths > 1 of `dtype` that fit `nbytes` bytes."""
    return tuple(2**k for k in range(1, 8) if 2**k * dtype.itemsize <= nbytes)


# a GPU thread's vector access moves at most 16 bytes in one instruction (ld.global.v4.b32, v2.b64)
_CUDA_VECTOR_WIDTHS = tuple((dt, _widths_up_to(16, dt)) for dt in (
    dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int8, dtypes.int16, dtypes.int32,
    dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64))


# the warp-level mma.sync shapes of sm_80 and newer that codegen lowers (codegen/tensor_core.py): one 16x8 tile of
# float32 accumulators from 16x16 and 16x8 tiles of float16 or bfloat16, by the 32 lanes of a warp
_CUDA_TENSOR_CORES = (TensorCore((16, 8, 16), dtypes.float16, dtypes.float32, 32),
                      TensorCore((16, 8, 16), dtypes.bfloat16, dtypes.float32, 32))


# AMD's matrix cores that codegen lowers (codegen/tensor_core.py): one 16x16 tile of float32 accumulators from 16x16
# tiles of float16 or bfloat16. RDNA3 (gfx11xx) computes it with WMMA by the 32 lanes of a wave32 wavefront, CDNA2/3
# (gfx90a, gfx94x) with MFMA by the 64 lanes of a wave64 one; the two place the tile elements in lanes differently.
_WMMA_TENSOR_CORES = (TensorCore((16, 16, 16), dtypes.float16, dtypes.float32, 32),
                      TensorCore((16, 16, 16), dtypes.bfloat16, dtypes.float32, 32))
_MFMA_TENSOR_CORES = (TensorCore((16, 16, 16), dtypes.float16, dtypes.float32, 64),
                      TensorCore((16, 16, 16), dtypes.bfloat16, dtypes.float32, 64))
# the CDNA chips with both v_mfma_f32_16x16x16f16 and v_mfma_f32_16x16x16bf16_1k (gfx908 lacks the latter)
_MFMA_ARCHS = frozenset({"gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"})


def _hip_tensor_cores(arch: str) -> tuple[TensorCore, ...]:
    if arch in _MFMA_ARCHS:
        return _MFMA_TENSOR_CORES
    if arch.startswith("gfx11"):  # gfx12's WMMA places the elements differently: not lowered
        return _WMMA_TENSOR_CORES
    return ()


def _positive_triple(name: str, value: object) -> None:
    if not (isinstance(value, tuple) and len(value) == 3 and all(type(v) is int and v > 0 for v in value)):
        raise ValueError(f"Target.{name} must be three positive ints, got {value!r}")


@record("Target")
@dataclass(frozen=True)
class Target:
    """A backend's code target.

    `renderer` picks the renderer by name ("c", "cuda", "hip", "metal", or a plugin's); `arch` is the
    renderer-specific architecture ("sm_90", "gfx1100", "x86-64-v3"). Locals are workgroup threads: a target with
    `has_local=False` (a CPU) runs every kernel with local size 1. `threads` is how many CPU threads may run one
    kernel's outer loop in parallel. `cache_sizes` are the bytes of each data cache level one core sees, innermost
    first (L1d, L2, L3...; a cache shared by several cores at its full size), empty where unknown: codegen sizes
    its cache blocks from them. `has_fma` says the device computes a fused multiply-add (one rounding) as fast as
    a product: codegen then accumulates a sum of products with MULACC (docs/ir.md §5, "Contraction").
    """

    device: str
    renderer: str
    arch: str = ""
    has_local: bool = False
    has_shared: bool = False
    global_max: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    local_max: tuple[int, int, int] = (1024, 1024, 64)
    max_threads_per_group: int = 1024
    shared_max: int = 0  # bytes of workgroup-shared memory
    # allowed vector widths per scalar dtype; a dtype not listed is scalar-only
    vector_widths: tuple[tuple[DType, tuple[int, ...]], ...] = ((dtypes.float32, (2, 4, 8)),)
    supported_dtypes: tuple[DType, ...] = field(default_factory=dtypes.all)
    tensor_cores: tuple[TensorCore, ...] = ()
    threads: int = 1
    cache_sizes: tuple[int, ...] = ()  # added in opset 1.1: older Target bytes read as () (unknown)
    has_fma: bool = False  # added in opset 1.3: older Target bytes read as False (no fused multiply-add)

    def __post_init__(self) -> None:
        for name in ("device", "renderer"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"Target.{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.arch, str):
            raise ValueError(f"Target.arch must be a string, got {self.arch!r}")
        for name in ("has_local", "has_shared", "has_fma"):
            if type(getattr(self, name)) is not bool:
                raise ValueError(f"Target.{name} must be a bool, got {getattr(self, name)!r}")
        _positive_triple("global_max", self.global_max)
        _positive_triple("local_max", self.local_max)
        for name in ("max_threads_per_group", "threads"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"Target.{name} must be a positive int, got {value!r}")
        if type(self.shared_max) is not int or self.shared_max < 0:
            raise ValueError(f"Target.shared_max must be a non-negative int, got {self.shared_max!r}")
        if not isinstance(self.vector_widths, tuple):
            raise ValueError(f"Target.vector_widths must be a tuple of (dtype, widths) pairs, "
                             f"got {self.vector_widths!r}")
        for entry in self.vector_widths:
            if not (isinstance(entry, tuple) and len(entry) == 2 and _is_value_dtype(entry[0])
                    and isinstance(entry[1], tuple) and all(type(w) is int and w > 1 for w in entry[1])):
                raise ValueError(f"Target.vector_widths entries are (scalar dtype, (widths > 1, ...)), got {entry!r}")
        if not (isinstance(self.supported_dtypes, tuple) and all(_is_value_dtype(d) for d in self.supported_dtypes)):
            raise ValueError(f"Target.supported_dtypes must be a tuple of scalar value dtypes, "
                             f"got {self.supported_dtypes!r}")
        if not (isinstance(self.tensor_cores, tuple) and all(isinstance(t, TensorCore) for t in self.tensor_cores)):
            raise ValueError(f"Target.tensor_cores must be a tuple of TensorCores, got {self.tensor_cores!r}")
        if not (isinstance(self.cache_sizes, tuple) and all(type(c) is int and c > 0 for c in self.cache_sizes)):
            raise ValueError(f"Target.cache_sizes must be a tuple of positive ints (bytes per level, L1 first), "
                             f"got {self.cache_sizes!r}")

    def vector_widths_for(self, dtype: DType) -> tuple[int, ...]:
        """The vector widths codegen may use for `dtype` (empty: scalar only)."""
        for dt, widths in self.vector_widths:
            if dt is dtype:
                return widths
        return ()

    @staticmethod
    def cuda(arch: str = "sm_90", device: str = "NV") -> Target:
        """The target of an NVIDIA GPU of compute capability `arch` (`sm_80`, `sm_90`, ...): the `cuda` renderer,
        workgroups of up to 1024 threads, 48 KiB of static shared memory per block (what every arch since sm_30
        gives without opting in), vector loads and stores of up to 16 bytes for every dtype but bool (`float4`,
        8 halves, 16 bytes), every dtype, and from sm_80 on the tensor cores of `mma.sync` m16n8k16 (float16 or
        bfloat16 x 16 -> float32), and a fused multiply-add (`has_fma`: every GPU's FFMA). Built here, in
        plygrad-ir, so a backend that depends only on plygrad-ir and plygrad-runtime can make it (docs/codegen.md
        §5)."""
        if not (isinstance(arch, str) and arch.startswith("sm_") and arch[3:].rstrip("af").isdigit()):
            raise ValueError(f"Target.cuda: arch must be an NVIDIA compute capability like 'sm_80' or 'sm_90a', "
                             f"got {arch!r}")
        return Target(device, "cuda", arch=arch, has_local=True, has_shared=True, global_max=(2**31 - 1, 65535, 65535),
                      local_max=(1024, 1024, 64), max_threads_per_group=1024, shared_max=48 * 1024,
                      vector_widths=_CUDA_VECTOR_WIDTHS, threads=1,
                      tensor_cores=_CUDA_TENSOR_CORES if int(arch[3:].rstrip("af")) >= 80 else (), has_fma=True)

    @staticmethod
    def metal(arch: str = "apple7", device: str = "METAL") -> Target:
        """The target of an Apple GPU of Metal family `arch` (`apple7` M1/A14, `apple8` M2, `apple9` M3/M4, or `mac2`
        for the AMD/Intel GPUs of older Macs): the `metal` renderer, threadgroups of up to 1024 threads, 32 KiB of
        threadgroup memory (what every Apple GPU has), scalar code (no vector widths yet), no tensor cores yet, and
        every dtype but float64, which Metal does not have: a float64 kernel fails in codegen naming the dtype and
        the target. bfloat16 works on every family (the metal renderer keeps it as 16-bit patterns, computed in
        float). The fp8 dtypes are not listed either (their software conversions take a double, which Metal
        lacks). A fused multiply-add (`has_fma`: MSL's `fma`). Built here so plygrad-metal, which depends on
        plygrad-runtime only, can make it (docs/codegen.md §5.2)."""
        if not (isinstance(arch, str) and (arch == "mac2" or (arch.startswith("apple") and arch[5:].isdigit()))):
            raise ValueError(f"Target.metal: arch must be a Metal GPU family like 'apple7', 'apple9' or 'mac2', "
                             f"got {arch!r}")
        return Target(device, "metal", arch=arch, has_local=True, has_shared=True,
                      global_max=(2**31 - 1, 65535, 65535), local_max=(1024, 1024, 1024), max_threads_per_group=1024,
                      shared_max=32 * 1024, vector_widths=(),
                      supported_dtypes=tuple(dt for dt in dtypes.all()
                                             if dt is not dtypes.float64 and dt not in dtypes.fp8s), threads=1,
                      has_fma=True)

    @staticmethod
    def hip(arch: str = "gfx1100", device: str = "AMD") -> Target:
        """The target of an AMD GPU of ISA `arch` (`gfx90a`, `gfx942`, `gfx1100`, ...; a feature suffix such as
        `:sramecc+:xnack-` from the device's gcnArchName is dropped): the `hip` renderer, workgroups of up to 1024
        work-items, 64 KiB of LDS (shared memory) per workgroup, the same 16-byte vector accesses as `Target.cuda`,
        every dtype, and the matrix cores codegen lowers: WMMA on RDNA3 (gfx11xx, 32-lane wavefronts) and MFMA on
        CDNA2/3 (gfx90a, gfx94x, 64-lane wavefronts), 16x16x16 float16 or bfloat16 -> float32, and a fused
        multiply-add (`has_fma`) (docs/codegen.md §5.3).
        Built here, in plygrad-ir, so plygrad-amd (which depends only on plygrad-runtime) and CI can make it."""
        if not isinstance(arch, str):
            raise ValueError(f"Target.hip: arch must be an AMD GPU ISA name like 'gfx1100', got {arch!r}")
        base = arch.split(":", maxsplit=1)[0]
        if not (base.startswith("gfx") and len(base) > 3 and all(c in "0123456789abcdef" for c in base[3:])):
            raise ValueError(f"Target.hip: arch must be an AMD GPU ISA name like 'gfx90a', 'gfx942' or 'gfx1100' "
                             f"(the device's gcnArchName), got {arch!r}")
        return Target(device, "hip", arch=base, has_local=True, has_shared=True, global_max=(2**31 - 1, 65535, 65535),
                      local_max=(1024, 1024, 1024), max_threads_per_group=1024, shared_max=64 * 1024,
                      vector_widths=_CUDA_VECTOR_WIDTHS, threads=1, tensor_cores=_hip_tensor_cores(base), has_fma=True)

    def to_bytes(self) -> bytes:
        """This target serialized (the same header and value encoding as graphs)."""
        from plygrad.ir.serialize import serialize_target

        return serialize_target(self)

    @staticmethod
    def from_bytes(data: bytes) -> Target:
        """Inverse of `to_bytes`; raises IRDecodeError/IRVersionError on bad input."""
        from plygrad.ir.serialize import deserialize_target

        return deserialize_target(data)
