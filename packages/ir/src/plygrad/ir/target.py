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
    kernel's outer loop in parallel.
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

    def __post_init__(self) -> None:
        for name in ("device", "renderer"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"Target.{name} must be a non-empty string, got {value!r}")
        if not isinstance(self.arch, str):
            raise ValueError(f"Target.arch must be a string, got {self.arch!r}")
        for name in ("has_local", "has_shared"):
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
        gives without opting in), scalar code (no vector widths yet), every dtype. Built here, in plygrad-ir, so a
        backend that depends only on plygrad-ir and plygrad-runtime can make it (docs/codegen.md §5)."""
        if not (isinstance(arch, str) and arch.startswith("sm_") and arch[3:].rstrip("af").isdigit()):
            raise ValueError(f"Target.cuda: arch must be an NVIDIA compute capability like 'sm_80' or 'sm_90a', "
                             f"got {arch!r}")
        return Target(device, "cuda", arch=arch, has_local=True, has_shared=True, global_max=(2**31 - 1, 65535, 65535),
                      local_max=(1024, 1024, 64), max_threads_per_group=1024, shared_max=48 * 1024, vector_widths=(),
                      threads=1)

    def to_bytes(self) -> bytes:
        """This target serialized (the same header and value encoding as graphs)."""
        from plygrad.ir.serialize import serialize_target

        return serialize_target(self)

    @staticmethod
    def from_bytes(data: bytes) -> Target:
        """Inverse of `to_bytes`; raises IRDecodeError/IRVersionError on bad input."""
        from plygrad.ir.serialize import deserialize_target

        return deserialize_target(data)
