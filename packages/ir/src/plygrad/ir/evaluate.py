"""A reference interpreter for scalar expression graphs.

`evaluate` computes the value of a scalar UOp graph node by node with the exact per-dtype arithmetic of
`plygrad.ir.scalar` (the same functions constant folding uses, but applied to the *unsimplified* graph), so it is
the oracle the simplifier's property tests compare against, and later an oracle for generated code.

Values of the graph's free variables come from `env`:
- `DEFINE_VAR` named `n` (arg `(n, min, max)`) reads `env[n]`, which must lie in [min, max];
- `RANGE` with arg `(axis, axis_type)` reads `env[f"range{axis}"]`, which must lie in [0, end);
- `SPECIAL` reads `env[arg]` when its arg is a str (e.g. "gidx0"), else `env[f"special{arg}"]`; also in [0, end).
`BIND` evaluates to the value it binds, and a variable bound by a BIND in the graph takes that value where `env`
does not name it. Walks are iterative, so graphs of any depth work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from plygrad.ir.dtype import ConstType
from plygrad.ir.errors import IRError
from plygrad.ir.ops import GroupOp, Ops
from plygrad.ir.scalar import bitcast_value, cast_value, exec_alu, truncate
from plygrad.ir.uop import UOp


class EvaluationError(IRError, ValueError):
    """A graph the interpreter cannot evaluate: a missing or out-of-range variable, or an op without a scalar
    value (memory ops, vectors); the message names the node."""


_LEAVES: Final = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL})


def env_key(node: UOp) -> str:
    """The `env` key that gives the value of a DEFINE_VAR, RANGE or SPECIAL node."""
    if node.op is Ops.DEFINE_VAR:
        return str(node.arg[0])
    if node.op is Ops.RANGE:
        return f"range{node.arg[0]}"
    if node.op is Ops.SPECIAL:
        return node.arg if isinstance(node.arg, str) else f"special{node.arg}"
    raise EvaluationError(f"{node.op!r} takes no value from env (only DEFINE_VAR, RANGE and SPECIAL do)")


def _lookup(node: UOp, env: Mapping[str, ConstType], values: dict[UOp, ConstType]) -> ConstType:
    key = env_key(node)
    if key not in env:
        raise EvaluationError(f"evaluate: no value for {node.op!r} {key!r}; pass it in env={{{key!r}: ...}}")
    value = env[key]
    if node.op is Ops.DEFINE_VAR:
        lo, hi = node.arg[1], node.arg[2]
    else:
        lo, hi = 0, int(values[node.src[0]]) - 1
    if not lo <= value <= hi:
        raise EvaluationError(f"evaluate: {key!r}={value!r} is outside its range [{lo}, {hi}]")
    return truncate(node.dtype, value)


def evaluate(root: UOp, env: Mapping[str, ConstType] | None = None) -> ConstType:
    """The value of the scalar graph `root` with free variables taken from `env` (see the module docstring).

    Raises EvaluationError for missing/out-of-range variables and ops that have no scalar value. Division by zero
    and out-of-range shifts have the values `exec_alu` defines for them (docs/ir.md §5).
    """
    env = {} if env is None else env
    order = list(root.sparents())
    # a variable bound in the graph (BIND) takes that value unless env gives one
    bound = {str(n.src[0].arg[0]): n.src[1].arg for n in order if n.op is Ops.BIND and n.src[0].op is Ops.DEFINE_VAR}
    if bound:
        env = {**bound, **env}
    values: dict[UOp, ConstType] = {}
    for node in order:
        op = node.op
        if op is Ops.CONST:
            values[node] = node.arg
        elif op in _LEAVES:
            values[node] = _lookup(node, env, values)
        elif op is Ops.BIND:
            values[node] = values[node.src[1]]
        elif op in GroupOp.ALU:
            if node.dtype.count != 1:
                raise EvaluationError(f"evaluate: {op!r} of vector dtype {node.dtype!r}; only scalars evaluate")
            operands = tuple(values[s] for s in node.src)
            # comparisons compute in their operands' dtype (the result is bool)
            dtype = node.src[0].dtype if op in GroupOp.Comparison else node.dtype
            values[node] = exec_alu(op, dtype, operands)
        elif op is Ops.CAST:
            values[node] = cast_value(values[node.src[0]], node.dtype)
        elif op is Ops.BITCAST:
            values[node] = bitcast_value(values[node.src[0]], node.src[0].dtype, node.dtype)
        else:
            raise EvaluationError(f"evaluate: {op!r} has no scalar value (evaluate handles CONST, DEFINE_VAR, BIND, "
                                  f"RANGE, SPECIAL, ALU ops, CAST and BITCAST)")
    return values[root]
