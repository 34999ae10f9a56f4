"""plygrad.frontend: lazy, PyTorch/tinygrad-like Tensors that build TENSOR-stage UOp graphs (docs/frontend.md).

    from plygrad.frontend import Tensor, dtypes, Device
    x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    print((x @ x.T).softmax().numpy())

Realizing hands the graph, as bytes, to the `plygrad.schedulers` entry point chosen by PLYGRAD_SCHEDULER or
`with Tensor.scheduler(name):`, and runs the schedule with plygrad.runtime.
"""

from plygrad.frontend.errors import ArgumentValueError, SchedulerNotFoundError
from plygrad.frontend.jit import JitError, TinyJit
from plygrad.frontend.scheduling import scheduler_name
from plygrad.frontend.symbolic import Variable
from plygrad.frontend.tensor import Tensor, enable_grad, no_grad
from plygrad.ir import AxisError, DType, DTypeError, ShapeError, dtypes
from plygrad.runtime import Device

__all__ = [
    "ArgumentValueError",
    "AxisError",
    "DType",
    "DTypeError",
    "Device",
    "JitError",
    "SchedulerNotFoundError",
    "ShapeError",
    "Tensor",
    "TinyJit",
    "Variable",
    "dtypes",
    "enable_grad",
    "no_grad",
    "scheduler_name",
]
