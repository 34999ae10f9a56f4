"""plygrad.ir: the one IR every plygrad layer speaks (DESIGN.md §2-§3, docs/ir.md)."""

from plygrad.ir.dtype import AddrSpace, ConstType, DType, DTypeKind, PtrDType, dtypes, least_upper_dtype, result_dtype
from plygrad.ir.errors import (
    DTypeError,
    IRDecodeError,
    IRError,
    IRVerifyError,
    IRVersionError,
    RewriteError,
    RewriteLoopError,
    ShapeError,
)
from plygrad.ir.ops import AxisType, GroupOp, Ops, OptOps
from plygrad.ir.records import BufferRef, KernelInfo, Opt, ParamInfo, ProgramInfo
from plygrad.ir.scalar import cast_value, exec_alu, truncate
from plygrad.ir.shape import broadcast_shapes
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target, TensorCore
from plygrad.ir.uop import UOp
from plygrad.ir.version import FORMAT_VERSION, OPSET_VERSION

__all__ = [
    "FORMAT_VERSION",
    "OPSET_VERSION",
    "AddrSpace",
    "AxisType",
    "BufferRef",
    "ConstType",
    "DType",
    "DTypeError",
    "DTypeKind",
    "GroupOp",
    "IRDecodeError",
    "IRError",
    "IRVerifyError",
    "IRVersionError",
    "KernelInfo",
    "Ops",
    "Opt",
    "OptOps",
    "ParamInfo",
    "ProgramInfo",
    "PtrDType",
    "RewriteError",
    "RewriteLoopError",
    "ShapeError",
    "Stage",
    "Target",
    "TensorCore",
    "UOp",
    "broadcast_shapes",
    "cast_value",
    "dtypes",
    "exec_alu",
    "least_upper_dtype",
    "result_dtype",
    "truncate",
]
