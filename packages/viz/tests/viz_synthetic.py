"""Synthetic traces for plygrad-viz's own tests: real IR (a LINEAR of add kernels built with plygrad.ir) with the
recorder's tables filled in by hand, so the package is tested without a runtime."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from plygrad.ir import AxisType, BufferRef, KernelInfo, Ops, Stage, UOp, dtypes, serialize

F32 = dtypes.float32


def _param(index: int, size: int) -> UOp:
    return UOp(Ops.PARAM, F32.ptr(size), (), index)


def _load(buf: UOp, idx: UOp) -> UOp:
    return UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, buf.dtype, (buf, idx)),))


def add_kernel(n: int, name: str) -> UOp:
    """out[i] = a[i] + b[i], params (out, a, b)."""
    out, a, b = _param(0, n), _param(1, n), _param(2, n)
    i = UOp.range(n, 0, AxisType.LOOP)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, i)), _load(a, i) + _load(b, i)))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, i)),), KernelInfo(name))


def buffer(buffer_id: int, n: int) -> UOp:
    return UOp(Ops.BUFFER, F32, (), BufferRef(buffer_id, "CPU", n))


def chain_linear(calls: int, n: int = 4, fan: int = 1) -> UOp:
    """CALL k writes buffer -(k+1) from buffers written `fan` CALLs before and the input buffer 0: depth k // fan."""
    body = add_kernel(n, "add")
    out = []
    for k in range(calls):
        src = buffer(-(k + 1 - fan), n) if k >= fan else buffer(0, n)
        out.append(UOp(Ops.CALL, dtypes.void, (body, buffer(-(k + 1), n), src, buffer(0, n))))
    return UOp(Ops.LINEAR, dtypes.void, tuple(out), (-calls,))


def kernel_record(name: str, ops: int = 1000, mem: int = 4000) -> dict[str, Any]:
    ast = serialize(add_kernel(4, name), Stage.KERNEL)
    return {"name": name, "device": "CPU", "source": f"void {name}(float* a) {{\n  a[0] = 1;\n}}\n",
            "ast": base64.b64encode(ast).decode(), "ast_sha": hashlib.sha256(ast).hexdigest(), "target": "",
            "renderer": "c", "arch": "x86-64", "opts": [["UPCAST", 0, 4]], "global_size": [1, 1, 1],
            "local_size": None, "ops": ops, "mem": mem,
            "params": [[0, "float32", 4, True], [1, "float32", 4, False], [2, "float32", 4, False]]}


def three_kernel_trace() -> dict[str, Any]:
    """Three kernels: k0 launched twice (10 us and 30 us), k1 once (20 us), k2 once with device time 5 us; a
    marker; allocations whose peak is 4096 + 1024 + 512 bytes on CPU."""
    linear = chain_linear(3)
    return {
        "format": "plygrad-trace", "version": [1, 0], "started_unix": 0.0, "wall_ns": 1_000_000,
        "argv": ["script.py"], "pid": 1,
        "schedules": [{"producer": "scheduler 'default'", "calls": [0, 1, 2],
                       "linear": base64.b64encode(serialize(linear, Stage.SCHEDULE)).decode()}],
        "runs": [[0, 100_000, 200_000, "script.py:3"], [0, 300_000, 400_000, "script.py:5"]],
        "kernels": [kernel_record("k0"), kernel_record("k1"), kernel_record("k2", ops=10_000)],
        "launches": [[0, 0, 110_000, 120_000, None], [1, 0, 130_000, 150_000, None],
                     [2, 0, 160_000, 190_000, 5_000], [0, 1, 310_000, 340_000, None]],
        "copies": [[1, "CPU", "DISK", 64, 305_000, 308_000]],
        "memory": [[100_000, 1, "CPU", 4096, "script.py:3", 0], [110_000, 2, "CPU", 1024, "script.py:3", 0],
                   [120_000, 1, "CPU", -4096, None, 0], [130_000, 3, "CPU", 2048, "script.py:4", 0],
                   [140_000, 4, "CPU", 512, "script.py:4", 0], [150_000, 2, "CPU", -1024, None, 0],
                   [160_000, 99, "CPU", -8, None, 0]],
        "markers": [[250_000, "epoch 1"]],
        "contents": [],
        "builds": [[20_000, 90_000, "scheduler 'default'", 3]],
        "beams": [{"kernel": "k0", "device": "CPU", "width": 2, "chosen": [["UPCAST", 0, 4]],
                   "ast_sha": hashlib.sha256(serialize(add_kernel(4, "k0"), Stage.KERNEL)).hexdigest(),
                   "tried": [[[], 3e-6], [[["UPCAST", 0, 4]], 1e-6], [[["UPCAST", 0, 2]], None]]}],
    }
