"""plygrad.ir: the one IR every plygrad layer speaks (docs/design.md §2-§3, docs/ir.md).

dtypes and promotion, `Ops` and hash-consed `UOp`s, the rewrite engine (`UPat`, `PatternMatcher`,
`graph_rewrite`), symbolic simplification, `Target`, per-stage verification, and binary/text serialization.
"""

from plygrad.ir.dtype import (
    AddrSpace,
    ConstType,
    DType,
    DTypeKind,
    DTypeLike,
    PtrDType,
    dtype_text,
    dtypes,
    least_upper_dtype,
    parse_dtype,
    result_dtype,
    sum_acc_dtype,
    to_dtype,
)
from plygrad.ir.errors import (
    AxisError,
    DTypeError,
    DTypeNameError,
    IRDecodeError,
    IRError,
    IRVerifyError,
    IRVersionError,
    RewriteError,
    RewriteLoopError,
    ShapeError,
    SizeTypeError,
)
from plygrad.ir.evaluate import EvaluationError, evaluate
from plygrad.ir.helpers import kernel_name, reduce_identity, strip_reshapes, written_buffer
from plygrad.ir.ops import AxisType, GroupOp, Ops, OptOps
from plygrad.ir.records import BufferRef, KernelInfo, Opt, ParamInfo, ProgramInfo
from plygrad.ir.rewrite import Order, PatternMatcher, graph_rewrite
from plygrad.ir.scalar import bitcast_value, cast_value, exec_alu, truncate
from plygrad.ir.serialize import deserialize, deserialize_target, serialize, serialize_target
from plygrad.ir.shape import Shape, broadcast_shapes
from plygrad.ir.stage import Stage
from plygrad.ir.structure import StructuralKey, structural_key
from plygrad.ir.symbolic import counter_bits, simplify, symbolic
from plygrad.ir.target import Target, TensorCore
from plygrad.ir.text import from_text, to_text
from plygrad.ir.uop import UOp
from plygrad.ir.upat import UPat
from plygrad.ir.verify import verify
from plygrad.ir.version import FORMAT_VERSION, OPSET_VERSION

__all__ = [
    "FORMAT_VERSION",
    "OPSET_VERSION",
    "AddrSpace",
    "AxisError",
    "AxisType",
    "BufferRef",
    "ConstType",
    "DType",
    "DTypeError",
    "DTypeKind",
    "DTypeLike",
    "DTypeNameError",
    "EvaluationError",
    "GroupOp",
    "IRDecodeError",
    "IRError",
    "IRVerifyError",
    "IRVersionError",
    "KernelInfo",
    "Ops",
    "Opt",
    "OptOps",
    "Order",
    "ParamInfo",
    "PatternMatcher",
    "ProgramInfo",
    "PtrDType",
    "RewriteError",
    "RewriteLoopError",
    "Shape",
    "ShapeError",
    "SizeTypeError",
    "Stage",
    "StructuralKey",
    "Target",
    "TensorCore",
    "UOp",
    "UPat",
    "bitcast_value",
    "broadcast_shapes",
    "cast_value",
    "counter_bits",
    "deserialize",
    "deserialize_target",
    "dtype_text",
    "dtypes",
    "evaluate",
    "exec_alu",
    "from_text",
    "graph_rewrite",
    "kernel_name",
    "least_upper_dtype",
    "parse_dtype",
    "reduce_identity",
    "result_dtype",
    "serialize",
    "serialize_target",
    "simplify",
    "strip_reshapes",
    "structural_key",
    "sum_acc_dtype",
    "symbolic",
    "to_dtype",
    "to_text",
    "truncate",
    "verify",
    "written_buffer",
]
