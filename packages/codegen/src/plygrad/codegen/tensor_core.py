"""Tensor cores: the `TC` action turns a matmul-shaped reduction into warp-level matrix-multiply-accumulate tiles.

A tensor core (`TensorCore`, one of `Target.tensor_cores`) computes one D = A @ B + C tile with the lanes of a warp
together, each lane holding the elements (fragments) the instruction fixes; `LAYOUTS` gives each `FragmentLayout`,
keyed by `(dims, threads)`: NVIDIA's mma.sync m16n8k16, AMD's RDNA3 WMMA and CDNA MFMA. `apply_tensor_core` splits
M, N and K into tiles plus a LOCAL `lane` range and rewrites the reduction as a WMMA over VECTORIZEd fragments with
four scalar REDUCE accumulators, so every later pass handles them unchanged; `fuse_wmma` (after
lower_reduce) makes the instruction accumulate in place. What fits (else `OptError`), the fragment tables and how
it is checked without a GPU: docs/codegen.md §5.1 (mma.sync) and §5.3 (AMD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from plygrad.codegen.errors import OptError
from plygrad.ir import AxisType, DType, Ops, Opt, OptOps, Target, TensorCore, UOp, dtypes

Index = TypeVar("Index", int, UOp)


class Position(Protocol):
    """Where element i of a lane's fragment sits in its tile, from the lane's group and member: the same arithmetic
    on ints (a reference for tests) and on index UOps (the kernel's index math)."""

    def __call__(self, group: Index, member: Index, i: int, /) -> tuple[Index, Index]: ...


def a_position(group: Index, member: Index, i: int) -> tuple[Index, Index]:
    """(row, column) in the 16x16 A tile of a lane's A element i (the module docstring's table)."""
    return group + 8 * ((i // 2) % 2), 2 * member + i % 2 + 8 * (i // 4)


def b_position(group: Index, member: Index, i: int) -> tuple[Index, Index]:
    """(row, column) in the 16x8 B tile of a lane's B element i."""
    return 2 * member + i % 2 + 8 * (i // 2), group


def c_position(group: Index, member: Index, i: int) -> tuple[Index, Index]:
    """(row, column) in the 16x8 C/D tile of a lane's accumulator element i."""
    return group + 8 * (i // 2), 2 * member + i % 2


class LaneSplit(Protocol):
    """The two indices a lane's positions are written in (mma.sync: group and member)."""

    def __call__(self, lane: Index) -> tuple[Index, Index]: ...


def mma_split(lane: Index) -> tuple[Index, Index]:
    """mma.sync's (group, member) of a lane: lane >> 2 and lane % 4."""
    return lane // 4, lane % 4


def amd_split(lane: Index) -> tuple[Index, Index]:
    """AMD's (col, half) of a lane: lane % 16 and lane // 16 (the module docstring's second table)."""
    return lane % 16, lane // 16


def wmma_a(col: Index, half: Index, i: int) -> tuple[Index, Index]:
    """A lane holds row `col` of A whole (lanes 16..31 a copy of 0..15's). `col * 0 + i` is the constant i as an
    index of the same kind as `col` (an int, or a UOp for the kernel's index math)."""
    return col, col * 0 + i


def wmma_b(col: Index, half: Index, i: int) -> tuple[Index, Index]:
    """A lane holds column `col` of B whole."""
    return col * 0 + i, col


def wmma_c(col: Index, half: Index, i: int) -> tuple[Index, Index]:
    """A lane holds column `col` of D, the even rows (lanes 0..15) or the odd ones (16..31)."""
    return half + 2 * i, col


def mfma_a(col: Index, half: Index, i: int) -> tuple[Index, Index]:
    """A lane holds 4 consecutive elements of row `col` of A, the quarter `half` (0..3) of it."""
    return col, half * 4 + i


def mfma_b(col: Index, half: Index, i: int) -> tuple[Index, Index]:
    """A lane holds 4 consecutive elements of column `col` of B."""
    return half * 4 + i, col


def mfma_c(col: Index, half: Index, i: int) -> tuple[Index, Index]:
    """A lane holds 4 consecutive rows of column `col` of D."""
    return half * 4 + i, col


@dataclass(frozen=True)
class FragmentLayout:
    """Which tile element each lane holds: elements per lane of A, B and C, and their positions as functions of the
    two indices `split` makes of the lane."""

    elements: tuple[int, int, int]  # of A, B, C per lane
    a: Position
    b: Position
    c: Position
    split: LaneSplit = mma_split


# the tensor cores codegen lowers, by (dims (M, N, K), lanes): a target's tensor core of another shape is not lowered
LAYOUTS: Final[dict[tuple[tuple[int, int, int], int], FragmentLayout]] = {
    ((16, 8, 16), 32): FragmentLayout((8, 4, 4), a_position, b_position, c_position),
    ((16, 16, 16), 32): FragmentLayout((16, 16, 8), wmma_a, wmma_b, wmma_c, amd_split),
    ((16, 16, 16), 64): FragmentLayout((4, 4, 4), mfma_a, mfma_b, mfma_c, amd_split),
}
_OUTPUT_AXES: Final = frozenset({AxisType.LOOP, AxisType.GLOBAL})


@dataclass(frozen=True)
class Matmul:
    """A matmul-shaped kernel's parts: its REDUCE, the factors A and B, and the ranges of M, N and K."""

    reduce: UOp
    a: UOp  # a value of the input dtype (the product's factor without its cast to the output dtype)
    b: UOp
    m: UOp
    n: UOp
    k: UOp


def _size(r: UOp) -> int:
    return int(r.src[0].arg)


def _factor(x: UOp, tc: TensorCore) -> UOp | None:
    """The input-dtype value behind one factor of the product: itself, or under a CAST to the accumulate dtype."""
    if x.op is Ops.CAST and x.dtype is tc.dtype_out:
        x = x.src[0]
    return x if x.dtype is tc.dtype_in else None


def _ranges(x: UOp) -> set[UOp]:
    return {n for n in x.toposort if n.op is Ops.RANGE}


def match_matmul(kernel: UOp, tc: TensorCore, axis: int, name: str) -> Matmul:
    """The matmul in `kernel` that tensor core `tc` can compute with `axis` as K; raises OptError saying what does
    not fit (see the module docstring for the shape asked for)."""
    where = f"kernel {name!r}: TC on axis {axis}"
    reduces = [n for n in kernel.toposort if n.op is Ops.REDUCE]
    if len(reduces) != 1:
        raise OptError(f"{where} needs a matmul-shaped kernel with exactly one REDUCE, this one has {len(reduces)}")
    red = reduces[0]
    axes = [int(r.arg[0]) for r in red.src[1:]]
    if red.arg is not Ops.ADD or axes != [axis] or red.src[1].arg[1] is not AxisType.REDUCE:
        raise OptError(f"{where}: the REDUCE must be an ADD over the REDUCE axis {axis} alone, it is "
                       f"{red.arg!r} over axes {axes} (apply TC before other actions on the reduce axis)")
    k = red.src[1]
    if k.src[0].op is not Ops.CONST:
        raise OptError(f"{where}: the reduce axis has a symbolic size; tensor-core tiles need constant sizes")
    if red.dtype is not tc.dtype_out:
        raise OptError(f"{where}: the sum is {red.dtype!r}, tensor core {tc.dims} accumulates {tc.dtype_out!r}")
    value = red.src[0]
    found = [_factor(s, tc) for s in value.src] if value.op is Ops.MUL else []
    factors = [x for x in found if x is not None]
    if len(factors) != 2:
        raise OptError(f"{where}: the reduced value must be a product of two {tc.dtype_in!r} values (each may be "
                       f"cast to {tc.dtype_out!r}), got {value.op.name} of "
                       f"{[f'{s.op.name} {s.dtype!r}' for s in value.src]}")
    ranges = [_ranges(factors[0]), _ranges(factors[1])]
    if not all(k in r for r in ranges):
        raise OptError(f"{where}: both factors must read along the reduce axis")
    picks: list[UOp] = []
    for own, other in ((ranges[0], ranges[1]), (ranges[1], ranges[0])):
        only = [r for r in own - other if r.arg[1] in _OUTPUT_AXES and r.src[0].op is Ops.CONST]
        if not only:
            raise OptError(f"{where}: needs an output axis only one factor reads and one only the other reads (the "
                           "rows and columns of a matmul); one factor has none")
        picks.append(max(only, key=lambda r: int(r.arg[0])))
    (a, m), (b, n) = sorted(zip(factors, picks, strict=True), key=lambda p: int(p[1].arg[0]))
    tile_m, tile_n, tile_k = tc.dims
    if _size(m) % tile_m or _size(n) % tile_n or _size(k) % tile_k:
        raise OptError(f"{where}: sizes M={_size(m)} (axis {m.arg[0]}), N={_size(n)} (axis {n.arg[0]}), "
                       f"K={_size(k)} must be multiples of the tensor core's tile {tc.dims}")
    for store in (x for x in kernel.toposort if x.op is Ops.STORE):
        if not {m, n} <= _ranges(store.src[0]):  # else lanes holding different elements would write one address
            raise OptError(f"{where}: every store must be indexed by both tile axes {m.arg[0]} and {n.arg[0]}")
    return Matmul(red, a, b, m, n, k)


def _tensor_core(target: Target | None, opt: Opt, name: str) -> TensorCore:
    cores = target.tensor_cores if target is not None else ()
    if not cores:
        where = "no target" if target is None else f"target {target.device}/{target.renderer} {target.arch}".rstrip()
        raise OptError(f"kernel {name!r}: {opt} needs a target with tensor cores, {where} has none "
                       "(Target.tensor_cores; NVIDIA GPUs have them from sm_80)")
    if type(opt.amount) is not int or not 0 <= opt.amount < len(cores):
        raise OptError(f"kernel {name!r}: {opt}: amount selects one of the target's tensor cores, 0.."
                       f"{len(cores) - 1}: {[(tc.dims, tc.dtype_in.name) for tc in cores]}")
    tc = cores[opt.amount]
    if (tc.dims, tc.threads) not in LAYOUTS:
        raise OptError(f"kernel {name!r}: {opt}: codegen has no fragment layout for tensor core {tc.dims} with "
                       f"{tc.threads} threads; it lowers (dims, threads) {sorted(LAYOUTS)}")
    return tc


def apply_tensor_core(kernel: UOp, opt: Opt, target: Target | None, name: str) -> UOp:
    """`kernel` with `Opt(TC, axis, amount)` applied (module docstring); raises OptError where it does not apply."""
    assert opt.op is OptOps.TC
    tc = _tensor_core(target, opt, name)
    mm = match_matmul(kernel, tc, opt.axis, name)
    layout = LAYOUTS[tc.dims, tc.threads]
    tile_m, tile_n, tile_k = tc.dims
    lane = UOp.range(tc.threads, max(int(r.arg[0]) for r in _ranges(kernel)) + 1, AxisType.LOCAL)
    group, member = layout.split(lane)

    def outer(r: UOp, tile: int) -> UOp | None:
        return UOp.range(_size(r) // tile, int(r.arg[0]), r.arg[1]) if _size(r) > tile else None

    m_o, n_o, k_o = outer(mm.m, tile_m), outer(mm.n, tile_n), outer(mm.k, tile_k)

    def at(r: UOp | None, tile: int, inner: UOp) -> UOp:
        return inner if r is None else r * tile + inner

    a_elems, b_elems = [], []
    for i in range(layout.elements[0]):
        row, col = layout.a(group, member, i)
        a_elems.append(mm.a.substitute({mm.m: at(m_o, tile_m, row), mm.k: at(k_o, tile_k, col)}))
    for i in range(layout.elements[1]):
        row, col = layout.b(group, member, i)
        b_elems.append(mm.b.substitute({mm.k: at(k_o, tile_k, row), mm.n: at(n_o, tile_n, col)}))
    acc_count = layout.elements[2]
    zero = UOp(Ops.VECTORIZE, tc.dtype_out.vec(acc_count), (UOp.const(tc.dtype_out, 0.0),) * acc_count)
    wmma = UOp(Ops.WMMA, tc.dtype_out.vec(acc_count), (_vector(a_elems), _vector(b_elems), zero), tc)
    stores: list[UOp] = []
    for out in kernel.src:
        body = out.src[0] if out.op is Ops.END else out
        for j in range(acc_count):
            lane_value = UOp(Ops.GEP, tc.dtype_out, (wmma,), (j,))
            total = lane_value if k_o is None else UOp(Ops.REDUCE, tc.dtype_out, (lane_value, k_o), Ops.ADD)
            row, col = layout.c(group, member, j)
            store = body.substitute({mm.reduce: total, mm.m: at(m_o, tile_m, row), mm.n: at(n_o, tile_n, col)})
            if out.op is Ops.END:
                closed = [{mm.m: m_o, mm.n: n_o}.get(r, r) for r in out.src[1:]]
                store = UOp(Ops.END, dtypes.void, (store, *(r for r in closed if r is not None), lane))
            stores.append(store)
    return kernel.replace(src=tuple(stores))


def _vector(elements: list[UOp]) -> UOp:
    dtype: DType = elements[0].dtype
    return UOp(Ops.VECTORIZE, dtype.vec(len(elements)), tuple(elements))


# ---- after lower_reduce: the accumulators go into the instruction ---------------------------------------------------
def _zero_accumulator(wmma: UOp) -> bool:
    acc = wmma.src[2]
    return acc.op is Ops.VECTORIZE and all(s.op is Ops.CONST and s.arg == 0 for s in acc.src)


def fuse_wmma(sink: UOp) -> UOp:
    """`x_j + GEP(WMMA(a, b, 0), j)` for every lane j of one WMMA becomes `GEP(WMMA(a, b, VECTORIZE(x)), j)`:
    D = A @ B + C with the accumulators as C, instead of a product tile added lane by lane (module docstring).

    A WMMA whose lanes are not each added exactly once is left as it is (still correct). An unrolled k loop chains
    the sums (`(acc + W0_j) + W1_j`): each round fuses the WMMAs whose addends hold no other fusable sum, so the
    chain becomes `WMMA(a1, b1, WMMA(a0, b0, acc))` in as many rounds as it is long."""
    while True:
        sums: dict[UOp, dict[int, list[tuple[UOp, UOp]]]] = {}  # WMMA -> lane -> [(the ADD, its other operand)]
        for node in sink.toposort:
            if node.op is not Ops.ADD:
                continue
            for x, y in ((node.src[0], node.src[1]), (node.src[1], node.src[0])):
                if (y.op is Ops.GEP and len(y.arg) == 1 and y.src[0].op is Ops.WMMA
                        and _zero_accumulator(y.src[0])):
                    sums.setdefault(y.src[0], {}).setdefault(int(y.arg[0]), []).append((node, x))
                    break
        pending = {add for lanes in sums.values() for found in lanes.values() for add, _ in found}
        mapping: dict[UOp, UOp] = {}
        for wmma, lanes in sums.items():
            width = wmma.dtype.count
            if sorted(lanes) != list(range(width)) or any(len(found) != 1 for found in lanes.values()):
                continue
            addends = [lanes[j][0][1] for j in range(width)]
            if any(n in pending for x in addends for n in x.toposort) or any(x.dtype.count != 1 for x in addends):
                continue
            acc = UOp(Ops.VECTORIZE, wmma.dtype, tuple(addends))
            fused = wmma.replace(src=(wmma.src[0], wmma.src[1], acc))
            for j in range(width):
                mapping[lanes[j][0][0]] = UOp(Ops.GEP, wmma.dtype.scalar(), (fused,), (j,))
        if not mapping:
            return sink
        sink = sink.substitute(mapping)


# ---- the heuristic's choice ------------------------------------------------------------------------------------------
TILES_PER_WARP: Final = 2  # UPCAST of each tile axis: a warp computes 2x2 tiles, reusing each fragment twice
WARPS_PER_AXIS: Final = 2  # LOCAL of each tile axis: 4 warps per block share the fragments through L1


def choose_tensor_core_opts(kernel: UOp, target: Target) -> list[Opt]:
    """`TC` with the first of the target's tensor cores the kernel fits, then 2x2 tiles per warp (UPCAST) and up to
    2x2 warps per block (LOCAL) where the tile counts divide; [] when no tensor core fits."""
    reduces = [n for n in kernel.toposort if n.op is Ops.REDUCE]
    if len(reduces) != 1 or len(reduces[0].src) != 2:
        return []
    axis = int(reduces[0].src[1].arg[0])
    for index, tc in enumerate(target.tensor_cores):
        if (tc.dims, tc.threads) not in LAYOUTS:
            continue
        try:
            mm = match_matmul(kernel, tc, axis, "")
        except OptError:
            continue
        opts = [Opt(OptOps.TC, axis, index)]
        tiles = {int(mm.m.arg[0]): _size(mm.m) // tc.dims[0], int(mm.n.arg[0]): _size(mm.n) // tc.dims[1]}
        # UPCAST only where the LOCAL after it still finds its warps (a small matmul wants blocks, not registers)
        for op, amount, least in ((OptOps.UPCAST, TILES_PER_WARP, WARPS_PER_AXIS), (OptOps.LOCAL, WARPS_PER_AXIS, 1)):
            for tile_axis, count in tiles.items():
                if count % amount == 0 and count // amount >= least:
                    opts.append(Opt(op, tile_axis, amount))
                    tiles[tile_axis] = count // amount
        return opts
    return []
