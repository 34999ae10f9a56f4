"""Register tiles and cache blocks for matmul-shaped kernels on a CPU (the part of `choose_opts` for them).

A matmul-shaped kernel is one reduction whose innermost output axis `j` is stored contiguously in a dtype with
vectors (a convolution's window sum included). `register_tile` plans, in order: vector lanes along `j` (or a
channel axis, `channel_axis`); a register tile of R rows x V vectors (`tile_shape`, bounded by ACCUMULATORS or
ACCUMULATORS_WIDE); the reduce loop innermost; a cache block of the reduction (BLOCK, sized by
`packed_panel_bytes` or the L2 and `panel_rows`); row blocks (TILE, ROW_BLOCK_TILES); threads on the panel axis.
Each step and why it pays is in docs/codegen.md §2.2; measurements live in bench/ and the commit messages.
Anything else keeps the general rules of heuristic.py (`register_tile` returns None).
"""

from __future__ import annotations

import math
from typing import Final

from plygrad.codegen.block import check_block
from plygrad.codegen.errors import OptError
from plygrad.codegen.opts import apply_opts, kernel_ranges
from plygrad.codegen.pack import packed_panel_bytes
from plygrad.codegen.vectorize import lane_stride
from plygrad.ir import AxisType, Ops, Opt, OptOps, PtrDType, Target, UOp, kernel_name

MAX_ROWS: Final = 16  # rows of a register tile: each a broadcast load per reduce step
MAX_VECTORS: Final = 4  # vectors side by side in a tile: each a vector load per reduce step
ACCUMULATORS: Final = 8  # vector accumulators of a tile with 16 vector registers (AVX2, SSE)
ACCUMULATORS_WIDE: Final = 16  # ... with 64-byte vectors (AVX-512: 32 registers)
FULL_UNROLL_MAX: Final = 8
DEFAULT_L2: Final = 1024 * 1024  # where Target.cache_sizes has no L2
CACHE_WAYS: Final = 16  # associativity assumed for the L2 (current x86 and Arm cores: 8 to 20 ways)
MIN_BLOCK: Final = 32  # reduce iterations per block below which the partial sums' loads and stores show
BALANCE: Final = 4  # an axis of at least 4 iterations per thread keeps the threads busy whatever the remainder
ROW_BLOCK_TILES: Final = 16  # row tiles per TILE block (step 5)
TRANSPOSED_ROWS: Final = 8  # accumulators of a tile whose gathered operand is transposed in W registers (step 2)
PACKED_GATHER_ROWS: Final = 32  # rows from which a gathered operand is packed (step 2): 8 row tiles share a pack


def _loads(value: UOp) -> list[UOp]:
    return [n for n in value.toposort if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX
            and n.src[0].src[0].op is Ops.PARAM]


def _depends(load: UOp, r: UOp) -> bool:
    return r in load.src[0].toposort


def row_axis(value: UOp, vector: UOp, candidates: list[UOp]) -> UOp | None:
    """The output axis of `candidates` that no load along the vector axis depends on (innermost first), so each
    vector load serves every row of the tile; None if there is none."""
    along = [n for n in _loads(value) if _depends(n, vector)]
    if not along:
        return None
    for r in reversed(candidates):
        if not any(_depends(n, r) for n in along):
            return r
    return None


def channel_axis(red: UOp, ranges: dict[int, UOp], outputs: list[int], sized: dict[int, int],
                 widest: int) -> int | None:
    """An output axis other than the innermost to take the vector lanes (module docstring, step 1), or None: one
    that `widest` divides, read by loads that are contiguous along it (vector loads) or depend on no other output
    axis (gathers pack.py can pack: a convolution's weight along its output channels), and with a row axis no such
    load depends on."""
    loads = _loads(red.src[0])
    for axis in reversed(outputs[:-1]):
        if sized[axis] % widest:
            continue
        along = [n for n in loads if _depends(n, ranges[axis])]
        gathered = [n for n in along if lane_stride(n.src[0].src[1], ranges[axis]) != 1]
        if along and not any(_depends(n, ranges[a]) for n in gathered for a in outputs if a != axis) \
                and row_axis(red.src[0], ranges[axis], [ranges[a] for a in outputs if a != axis and sized[a] >= 2]):
            return axis
    return None


def _largest_divisor(n: int, limit: int, at_least: int) -> int:
    return max((d for d in range(at_least, min(n, limit) + 1) if n % d == 0), default=0)


def tile_shape(rows: int, panels: int, budget: int, copies: int, copies_max: int) -> tuple[int, int]:
    """(R, V): the most accumulators R*V <= budget (R <= MAX_ROWS rows dividing `rows`, V <= MAX_VECTORS vectors
    dividing `panels`, R*V*copies scalar copies <= copies_max), fewest loads R+V per step among those, then the
    most rows (a narrower panel of the streamed operand)."""
    shapes = [(r, v) for r in range(1, MAX_ROWS + 1) for v in range(1, MAX_VECTORS + 1)
              if rows % r == 0 and panels % v == 0 and r * v <= budget and r * v * copies <= copies_max]
    return max(shapes, key=lambda rv: (rv[0] * rv[1], -(rv[0] + rv[1]), rv[0]), default=(1, 1))


def register_tile(kernel: UOp, target: Target, width: int, *, scalar_ops: int, copies_max: int,
                  thread_min_work: int) -> list[Opt] | None:
    """The optimizations of the module docstring for a matmul-shaped `kernel` whose innermost output axis takes
    vectors of `width`, or None when the kernel is not one."""
    reductions = [n for n in kernel.toposort if n.op is Ops.REDUCE]
    stores = [n for n in kernel.toposort if n.op is Ops.STORE and isinstance(n.src[0].dtype, PtrDType)]
    if len(reductions) != 1 or len(stores) != 1:
        return None
    red = reductions[0]
    ranges = kernel_ranges(kernel)
    sized = {a: int(r.src[0].arg) for a, r in ranges.items() if r.src[0].op is Ops.CONST}
    outputs = sorted(a for a, r in ranges.items() if r.arg[1] is AxisType.LOOP and a in sized)
    loops = sorted(int(r.arg[0]) for r in red.src[1:] if r.arg[1] is AxisType.REDUCE and int(r.arg[0]) in sized)
    if len(outputs) < 2 or not loops or len(loops) != len(red.src) - 1:
        return None
    vector = outputs[-1]
    widest = max(target.vector_widths_for(red.dtype), default=width)
    channels = None if target.has_local or width >= widest else channel_axis(red, ranges, outputs, sized, widest)
    if channels is not None:
        vector, width = channels, widest
    if not width or width * scalar_ops > copies_max:
        return None
    rows = row_axis(red.src[0], ranges[vector], [ranges[a] for a in outputs if a != vector and sized[a] >= 2])
    if rows is None:
        return None
    row = int(rows.arg[0])
    budget = ACCUMULATORS_WIDE if widest * red.dtype.itemsize >= 64 else ACCUMULATORS
    panels = sized[vector] // width
    # an operand strided along the vector axis (`a @ b.T`: both read along K) is gathered lane by lane: one vector
    # per tile (each more is `width` more scalar loads), as many rows as fit to share each gathered vector
    strided = [n for n in _loads(red.src[0]) if _depends(n, ranges[vector])
               and lane_stride(n.src[0].src[1], ranges[vector]) != 1]
    gathered = bool(strided)
    inner_range = _range(red, loops[-1])
    # a gathered operand contiguous along the innermost reduce loop: UNROLL that loop by the vector width and the
    # W copies read W x W blocks, loaded as rows and transposed in registers (transpose.py); the W transposed
    # vectors then need registers beside the accumulators, so fewer rows
    transposed = (gathered and sized[loops[-1]] % width == 0
                  and all(lane_stride(n.src[0].src[1], inner_range) == 1 for n in strided))
    work = 1
    for size in sized.values():
        work *= max(size, 1)

    def plan(gathered: bool, transposed: bool) -> list[Opt]:
        # an op without a vector form is copied once per lane of every vector of the tile, not once per vector
        copies = max(scalar_ops * width, 1)
        r_count, v_count = tile_shape(sized[row], 1 if gathered else panels,
                                      TRANSPOSED_ROWS if transposed else budget, copies, copies_max)
        opts = [Opt(OptOps.UPCAST, vector, width)]
        if v_count > 1:
            opts.append(Opt(OptOps.UPCAST, vector, v_count))
        if r_count > 1:
            opts.append(Opt(OptOps.UPCAST, row, r_count))
        outer, inner = loops[0], loops[-1]
        block = _block(kernel, target, red, vector=ranges[vector], outer=outer, columns=v_count * width,
                       packed=not gathered and not target.has_local, opts=opts)
        opts += block
        inner_size = block[0].amount if block and inner == outer else sized[inner]
        if transposed and inner_size % width == 0:
            opts.append(Opt(OptOps.UNROLL, inner, width))
        elif 2 <= inner_size <= FULL_UNROLL_MAX:
            opts.append(Opt(OptOps.UNROLL, inner, inner_size))
        elif r_count * v_count < 4 and inner_size % 4 == 0:
            opts.append(Opt(OptOps.UNROLL, inner, 4))
        row_tiles = sized[row] // r_count
        blocked_rows = not gathered and row_tiles >= 2 * ROW_BLOCK_TILES and row_tiles % ROW_BLOCK_TILES == 0
        if blocked_rows:
            opts.append(Opt(OptOps.TILE, row, ROW_BLOCK_TILES))
        if target.threads > 1 and work >= thread_min_work:
            tiles = {**sized, vector: panels // v_count,
                     row: row_tiles // ROW_BLOCK_TILES if blocked_rows else row_tiles}
            opts += _threads(target, outputs, vector, row, tiles, gathered=gathered, blocked_rows=blocked_rows)
        return opts

    # the rows that share a pack: the row axis and every batch axis the gathered operand does not depend on (the
    # weight of attention's output projection serves all 8 x 21 rows of its batch)
    shared_rows = math.prod(sized[a] for a in outputs
                            if a != vector and not any(_depends(n, ranges[a]) for n in strided))
    if transposed and not target.has_local and shared_rows >= PACKED_GATHER_ROWS:
        # on a CPU such an operand is packed instead (pack.py): once per panel and reduce block, transposed in the
        # pack loop, then every row tile reads it as contiguous vectors, as if it were stored (K, N). Unless the
        # threads split the row tiles themselves: no loop inside a thread would then reuse a pack
        packed = plan(gathered=False, transposed=False)
        if not any(o.op is OptOps.THREAD and o.axis == row for o in packed) or any(o.op is OptOps.TILE for o in packed):
            return packed
    return plan(gathered, transposed)


def panel_rows(cache: int, stride: int, row_bytes: int) -> int:
    """How many rows of a panel (`row_bytes` each, `stride` bytes apart) a `cache`-byte, CACHE_WAYS-way cache
    holds at once. Addresses a multiple of the way size (cache / ways) apart share a set, so rows a power of two
    apart compete for a few sets: rows 8 KiB apart in a 2 MiB 16-way L2 fit only 256 at a time, not 8192."""
    way = cache // CACHE_WAYS
    positions = way // math.gcd(way, stride)
    return max(1, min(cache // row_bytes, positions * CACHE_WAYS))


def _block(kernel: UOp, target: Target, red: UOp, *, vector: UOp, outer: int, columns: int, packed: bool,
           opts: list[Opt]) -> list[Opt]:
    """BLOCK the reduction's outermost loop when its panel outgrows half the L2 (module docstring, step 4)."""
    r = _range(red, outer)
    panel_loads = [n for n in _loads(red.src[0]) if _depends(n, vector)]
    strides = [lane_stride(n.src[0].src[1], r) for n in panel_loads]
    if not panel_loads or any(not s for s in strides):
        return []  # no panel along the reduction (or index math this analysis cannot follow)
    row_bytes = columns * red.dtype.itemsize * len(panel_loads)
    stride = max(abs(s or 0) for s in strides) * red.dtype.itemsize
    per_step = 1  # reduce iterations inside one step of the outer loop (a window's kh*kw): rows they add
    for s in red.src[1:]:
        if s is not r:
            per_step *= int(s.src[0].arg)
    if packed:  # pack.py copies each block of the panel into a contiguous buffer: it should stay in the L1
        fits = packed_panel_bytes(target) // (row_bytes * per_step)
    else:
        l2 = target.cache_sizes[1] if len(target.cache_sizes) > 1 else DEFAULT_L2
        fits = panel_rows(l2, stride, row_bytes) // (2 * per_step)  # half the L2: the other operand's block too
    size = int(r.src[0].arg)
    if size <= fits:
        return []
    amount = _largest_divisor(size, fits, max(2, -(-MIN_BLOCK // per_step)))
    if not amount:
        return []
    block = Opt(OptOps.BLOCK, outer, amount)
    tiled = apply_opts(kernel, opts)
    try:
        check_block(tiled, kernel_ranges(tiled)[outer], block, target, kernel_name(kernel))
    except OptError:
        return []
    return [block]


def _range(red: UOp, axis: int) -> UOp:
    return next(s for s in red.src[1:] if int(s.arg[0]) == axis)


def _balanced(tiles: int, threads: int) -> bool:
    """Whether `tiles` iterations split evenly enough over `threads` (at most 1/BALANCE of them idle at the end)."""
    return tiles % threads == 0 or tiles >= BALANCE * threads


def _threads(target: Target, outputs: list[int], vector: int, row: int, tiles: dict[int, int], *,
             gathered: bool, blocked_rows: bool) -> list[Opt]:
    """THREAD the panel axis when it splits evenly over the threads, else the outermost output axis that does, else
    the one with the most iterations (step 6). When the panel operand is gathered (`a @ b.T`: no panel to keep in
    cache), a batch axis (neither the rows nor the panels: attention's heads) that splits evenly comes first: whole
    matrices per thread, one team for the kernel instead of one per row (q @ k^T 64 -> 74 GFLOP/s). With row blocks
    (step 5) a batch axis comes first too, then the row blocks: each thread keeps its own block of `a` in its L2."""
    batches = [a for a in outputs if a not in (vector, row)] if gathered or blocked_rows else []
    first = [row] if blocked_rows else []
    order = [*batches, *first, vector, *(a for a in outputs if a != vector and a not in batches and a not in first)]
    axis = next((a for a in order if tiles[a] >= 2 and _balanced(tiles[a], target.threads)), None)
    if axis is None:
        axis = max(order, key=lambda a: tiles[a])
    return [Opt(OptOps.THREAD, axis, target.threads)] if tiles[axis] >= 2 else []
