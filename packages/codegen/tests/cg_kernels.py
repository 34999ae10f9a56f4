"""Hand-built kernel ASTs (KERNEL stage, as the runtime hands them to codegen) for the codegen tests.

Conventions of the contract: PARAMs are numbered outputs first, then inputs; every RANGE has its own axis id;
output loops are AxisType.LOOP and reduction loops AxisType.REDUCE.
"""

from __future__ import annotations

from plygrad.ir import AxisType, DType, KernelInfo, Ops, UOp, dtypes

IDX = dtypes.index
F32 = dtypes.float32


def param(index: int, dtype: DType, size: int) -> UOp:
    return UOp(Ops.PARAM, dtype.ptr(size), (), index)


def load(buf: UOp, idx: UOp, gate: UOp | None = None) -> UOp:
    index = UOp(Ops.INDEX, buf.dtype, (buf, idx) if gate is None else (buf, idx, gate))
    return UOp(Ops.LOAD, buf.dtype.base, (index,))  # type: ignore[attr-defined]


def store(buf: UOp, idx: UOp, value: UOp, gate: UOp | None = None) -> UOp:
    index = UOp(Ops.INDEX, buf.dtype, (buf, idx) if gate is None else (buf, idx, gate))
    return UOp(Ops.STORE, dtypes.void, (index, value))


def sink(*stores: UOp, name: str = "") -> UOp:
    return UOp(Ops.SINK, dtypes.void, stores, KernelInfo(name) if name else None)


def loop(size: int | UOp, axis: int) -> UOp:
    return UOp.range(size, axis, AxisType.LOOP)


def red(size: int, axis: int) -> UOp:
    return UOp.range(size, axis, AxisType.REDUCE)


def binary(op: Ops, dtype: DType, n: int) -> UOp:
    """out[i] = op(a[i], b[i])."""
    out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype
    out, a, b = param(0, out_dtype, n), param(1, dtype, n), param(2, dtype, n)
    i = loop(n, 0)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i, load(a, i).alu(op, load(b, i))), i)))


def unary(op: Ops, dtype: DType, n: int) -> UOp:
    """out[i] = op(a[i])."""
    out, a = param(0, dtype, n), param(1, dtype, n)
    i = loop(n, 0)
    return sink(store(out, i, load(a, i).alu(op)))


def elementwise_add(dtype: DType, n: int) -> UOp:
    return binary(Ops.ADD, dtype, n)


def broadcast_strided(m: int, n: int) -> UOp:
    """out[i, j] = a[j, i] (a transposed read) * b[i] (broadcast along j) + 1, out of shape (m, n)."""
    out, a, b = param(0, dtypes.float32, m * n), param(1, dtypes.float32, n * m), param(2, dtypes.float32, m)
    i, j = loop(m, 0), loop(n, 1)
    value = load(a, j * m + i) * load(b, i) + 1.0
    return sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j, value), i, j)))


def reduce_rows(op: Ops, dtype: DType, m: int, n: int) -> UOp:
    """out[i] = reduce_op over j of a[i, j], a of shape (m, n)."""
    out, a = param(0, dtype, m), param(1, dtype, m * n)
    i, j = loop(m, 0), red(n, 1)
    total = UOp(Ops.REDUCE, dtype, (load(a, i * n + j), j), op)
    return sink(store(out, i, total))


def matmul(m: int, k: int, n: int, dtype: DType = dtypes.float32) -> UOp:
    """out[i, j] = sum_r a[i, r] * b[r, j]."""
    out, a, b = param(0, dtype, m * n), param(1, dtype, m * k), param(2, dtype, k * n)
    i, j, r = loop(m, 0), loop(n, 1), red(k, 2)
    acc = UOp(Ops.REDUCE, dtype, (load(a, i * k + r) * load(b, r * n + j), r), Ops.ADD)
    return sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j, acc), i, j)), name="matmul")


def padded(n: int, before: int, after: int) -> UOp:
    """out = pad(a, (before, after)) * 2: a gated load reads 0 in the padding."""
    size = n + before + after
    out, a = param(0, dtypes.float32, size), param(1, dtypes.float32, n)
    i = loop(size, 0)
    inside = (UOp.const(IDX, before - 1) < i).alu(Ops.AND, i < before + n)
    return sink(store(out, i, load(a, i - before, inside) * 2.0))


def padded_where(n: int, before: int) -> UOp:
    """out[i] = i < before ? -1 : a[i - before] (padding with a value through WHERE; the load stays gated)."""
    size = n + before
    out, a = param(0, dtypes.float32, size), param(1, dtypes.float32, n)
    i = loop(size, 0)
    inside = (UOp.const(IDX, before - 1) < i)
    return sink(store(out, i, inside.where(load(a, i - before, inside), -1.0)))


def gated_store(n: int, limit: int) -> UOp:
    """out[i] = a[i] + 1 only for i < limit (a gated STORE: the rest of out is left alone)."""
    out, a = param(0, dtypes.float32, n), param(1, dtypes.float32, n)
    i = loop(n, 0)
    return sink(store(out, i, load(a, i) + 1.0, gate=i < limit))


def multi_output(n: int) -> UOp:
    """out0[i] = a[i] + b[i]; out1[i] = a[i] * b[i] (two STOREs in one SINK)."""
    out0, out1 = param(0, dtypes.float32, n), param(1, dtypes.float32, n)
    a, b = param(2, dtypes.float32, n), param(3, dtypes.float32, n)
    i = loop(n, 0)
    x, y = load(a, i), load(b, i)
    return sink(store(out0, i, x + y), store(out1, i, x * y))


def softmax_like(m: int, n: int) -> UOp:
    """out[i, j] = exp2(a[i, j] - max_j a[i, j]) / sum_j exp2(a[i, j] - max): two reduces, one feeding the other."""
    out, a = param(0, dtypes.float32, m * n), param(1, dtypes.float32, m * n)
    i, j0, j1, j2 = loop(m, 0), red(n, 1), red(n, 2), loop(n, 3)
    mx = UOp(Ops.REDUCE, dtypes.float32, (load(a, i * n + j0), j0), Ops.MAX)
    total = UOp(Ops.REDUCE, dtypes.float32, ((load(a, i * n + j1) - mx).alu(Ops.EXP2), j1), Ops.ADD)
    value = (load(a, i * n + j2) - mx).alu(Ops.EXP2) / total
    return sink(UOp(Ops.END, dtypes.void, (store(out, i * n + j2, value), i, j2)))


def scaled_by_var(max_n: int) -> UOp:
    """out[i] = a[i] * n for i < n, where n is a DEFINE_VAR (a symbolic loop bound)."""
    out, a = param(0, dtypes.float32, max_n), param(1, dtypes.float32, max_n)
    n = UOp.variable("n", 1, max_n)
    i = loop(n, 0)
    return sink(store(out, i, load(a, i) * n.cast(dtypes.float32)))


def variance_shared_range(m: int, n: int) -> UOp:
    """out[i] = sum_j (a[i, j] - mean_i)^2 where the mean's REDUCE and the variance's REDUCE share one RANGE."""
    out, a = param(0, dtypes.float32, m), param(1, dtypes.float32, m * n)
    i, j = loop(m, 0), red(n, 1)
    x = load(a, i * n + j)
    mean = UOp(Ops.REDUCE, dtypes.float32, (x, j), Ops.ADD) * (1.0 / n)
    d = x - mean
    return sink(store(out, i, UOp(Ops.REDUCE, dtypes.float32, (d * d, j), Ops.ADD)))


def full_sum(n: int) -> UOp:
    """out[0] = sum_j a[j]: a reduction whose output has no loop at all."""
    out, a = param(0, dtypes.float32, 1), param(1, dtypes.float32, n)
    j = red(n, 0)
    return sink(store(out, UOp.const(IDX, 0), UOp(Ops.REDUCE, dtypes.float32, (load(a, j), j), Ops.ADD)))


def no_loops() -> UOp:
    """out[0] = a[1] * 3: a kernel without any RANGE."""
    out, a = param(0, dtypes.int32, 1), param(1, dtypes.int32, 2)
    return sink(store(out, UOp.const(IDX, 0), load(a, UOp.const(IDX, 1)) * 3))


def sum_of_maxes(m: int, n: int, k: int) -> UOp:
    """out[i] = sum_j max_r a[i, j, r]: a reduction nested in another."""
    out, a = param(0, dtypes.float32, m), param(1, dtypes.float32, m * n * k)
    i, j, r = loop(m, 0), red(n, 1), red(k, 2)
    inner = UOp(Ops.REDUCE, dtypes.float32, (load(a, i * (n * k) + j * k + r), r), Ops.MAX)
    return sink(store(out, i, UOp(Ops.REDUCE, dtypes.float32, (inner, j), Ops.ADD)))


def max_of_dots(m: int, keys: int, dim: int) -> UOp:
    """out[i] = max_j sum_d q[i, d] * k[j, d]: softmax's max over recomputed attention scores."""
    out, q, k = param(0, F32, m), param(1, F32, m * dim), param(2, F32, keys * dim)
    i, j, d = loop(m, 0), red(keys, 1), red(dim, 2)
    dot = UOp(Ops.REDUCE, F32, (load(q, i * dim + d) * load(k, j * dim + d), d), Ops.ADD)
    return sink(store(out, i, UOp(Ops.REDUCE, F32, (dot, j), Ops.MAX)))


def count(n: int) -> UOp:
    """out[i] = sum_j 1 (the reduced value does not depend on the reduce range)."""
    out = param(0, dtypes.int32, 4)
    i, j = loop(4, 0), red(n, 1)
    return sink(store(out, i, UOp(Ops.REDUCE, dtypes.int32, (UOp.const(dtypes.int32, 1), j), Ops.ADD)))


def batched(batch: int, m: int, k: int, n: int, transposed: bool) -> UOp:
    """out[b, i, j] = sum_r a[b, i, r] * w[b, r, j] (w read as w[b, j, r] when `transposed`: q @ k^T)."""
    out, a, w = param(0, F32, batch * m * n), param(1, F32, batch * m * k), param(2, F32, batch * k * n)
    b, i, j, r = loop(batch, 0), loop(m, 1), loop(n, 2), red(k, 3)
    w_index = b * (k * n) + (j * k + r if transposed else r * n + j)
    total = UOp(Ops.REDUCE, F32, (load(a, b * (m * k) + i * k + r) * load(w, w_index), r), Ops.ADD)
    return sink(UOp(Ops.END, dtypes.void, (store(out, b * (m * n) + i * n + j, total), b, i, j)), name="bmm")


def conv1d(cout: int, cin: int, width: int, ks: int = 3) -> UOp:
    """out[o, x] = sum_c,s w[o, c, s] * in[c, x + s - 1], zero outside the input (padding 1): gates per lane."""
    out, x, w = param(0, F32, cout * width), param(1, F32, cin * width), param(2, F32, cout * cin * ks)
    o, p, c, s = loop(cout, 0), loop(width, 1), red(cin, 2), red(ks, 3)
    pos = p + s - 1
    inside = (UOp.const(dtypes.index, -1) < pos).alu(Ops.AND, pos < width)
    total = UOp(Ops.REDUCE, F32, (load(w, o * (cin * ks) + c * ks + s) * load(x, c * width + pos, inside), c, s),
                Ops.ADD)
    return sink(UOp(Ops.END, dtypes.void, (store(out, o * width + p, total), o, p)), name="conv1d")


def _padded_pixel(x: UOp, cin: int, size: int, n: UOp, c: UOp, yy: UOp, xx: UOp) -> UOp:
    """in[n, c, yy, xx] of a (batch, cin, size, size) image, 0 outside it (a gated load: padding 1)."""
    low = UOp.const(dtypes.index, -1)
    inside = (low < yy).alu(Ops.AND, yy < size).alu(Ops.AND, low < xx).alu(Ops.AND, xx < size)
    return load(x, n * (cin * size * size) + c * (size * size) + yy * size + xx, inside)


def conv2d(batch: int, cout: int, cin: int, size: int, ks: int = 3) -> UOp:
    """out[n, o, y, x] = sum_c,i,j w[o, c, i, j] * in[n, c, y + i - 1, x + j - 1], zero outside (padding 1)."""
    out, x, w = param(0, F32, batch * cout * size * size), param(1, F32, batch * cin * size * size), \
        param(2, F32, cout * cin * ks * ks)
    n, o, py, px, c, i, j = (loop(batch, 0), loop(cout, 1), loop(size, 2), loop(size, 3), red(cin, 4), red(ks, 5),
                             red(ks, 6))
    pixel = _padded_pixel(x, cin, size, n, c, py + i - 1, px + j - 1)
    total = UOp(Ops.REDUCE, F32, (load(w, o * (cin * ks * ks) + c * (ks * ks) + i * ks + j) * pixel, c, i, j),
                Ops.ADD)
    index = n * (cout * size * size) + o * (size * size) + py * size + px
    return sink(UOp(Ops.END, dtypes.void, (store(out, index, total), n, o, py, px)), name="conv2d")


def conv2d_weight_grad(batch: int, cout: int, cin: int, size: int, ks: int = 3) -> UOp:
    """A convolution's weight gradient: out[o, c, i, j] = sum_n,y,x g[n, o, y, x] * in[n, c, y + i - 1, x + j - 1]
    (padding 1): a reduction over the batch and pixels into a few small output axes (the window's)."""
    out, g, x = param(0, F32, cout * cin * ks * ks), param(1, F32, batch * cout * size * size), \
        param(2, F32, batch * cin * size * size)
    o, c, i, j, n, py, px = (loop(cout, 0), loop(cin, 1), loop(ks, 2), loop(ks, 3), red(batch, 4), red(size, 5),
                             red(size, 6))
    pixel = _padded_pixel(x, cin, size, n, c, py + i - 1, px + j - 1)
    grad = load(g, n * (cout * size * size) + o * (size * size) + py * size + px)
    total = UOp(Ops.REDUCE, F32, (grad * pixel, n, py, px), Ops.ADD)
    index = o * (cin * ks * ks) + c * (ks * ks) + i * ks + j
    return sink(UOp(Ops.END, dtypes.void, (store(out, index, total), o, c, i, j)), name="conv2d_weight_grad")


def window_grads(batch: int, cout: int, cin: int, pixels: int, window: int) -> UOp:
    """The input gradient of a convolution before its windows are folded back: out[n, c, p, k] =
    sum_o g[n, o, p] * w[o, c, k] (the frontend's backward of a conv's unfold), stored (n, c, p, k)."""
    out = param(0, F32, batch * cin * pixels * window)
    g, w = param(1, F32, batch * cout * pixels), param(2, F32, cout * cin * window)
    n, c, p, k, o = loop(batch, 0), loop(cin, 1), loop(pixels, 2), loop(window, 3), red(cout, 4)
    grad, weight = load(g, n * (cout * pixels) + o * pixels + p), load(w, o * (cin * window) + c * window + k)
    total = UOp(Ops.REDUCE, F32, (grad * weight, o), Ops.ADD)
    index = ((n * cin + c) * pixels + p) * window + k
    return sink(UOp(Ops.END, dtypes.void, (store(out, index, total), n, c, p, k)), name="window_grads")


def heads_projection(batch: int, tokens: int, heads: int, head_dim: int, n: int, w_out_in: bool = True) -> UOp:
    """Attention's output projection over heads laid out (batch, heads, tokens, head_dim):
    out[b, i, j] = sum_r x[b, r // head_dim, i, r % head_dim] * w[j, r] (w[r, j] unless `w_out_in`), the weight
    shared by every row."""
    k = heads * head_dim
    out, x, w = param(0, F32, batch * tokens * n), param(1, F32, batch * tokens * k), param(2, F32, n * k)
    b, i, j, r = loop(batch, 0), loop(tokens, 1), loop(n, 2), red(k, 3)
    dim = UOp.const(IDX, head_dim)
    x_index = b * (tokens * k) + r.alu(Ops.IDIV, dim) * (tokens * head_dim) + i * head_dim + r.alu(Ops.MOD, dim)
    weight = load(w, j * k + r if w_out_in else r * n + j)
    total = UOp(Ops.REDUCE, F32, (load(x, x_index) * weight, r), Ops.ADD)
    return sink(UOp(Ops.END, dtypes.void, (store(out, b * (tokens * n) + i * n + j, total), b, i, j)), name="heads")
