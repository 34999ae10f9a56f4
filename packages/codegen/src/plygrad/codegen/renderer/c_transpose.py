"""The C renderer's register transpose: `plygrad_transpose_<type>(m)` transposes the W x W block held in W vectors
`m[0..W-1]` (m[r][c] becomes m[c][r]), for the VECTORIZEs of transpose.py.

A network of log2(W) stages of two-input shuffles: at stage h (W/2, W/4, ..., 1) each pair of rows (r, r + h),
r & h == 0, swaps its off-diagonal h x h blocks,

    out[r][c]     = c & h ? in[r + h][c - h] : in[r][c]
    out[r + h][c] = c & h ? in[r + h][c]     : in[r][c + h]

so W*log2(W) shuffles (64 for 16 floats: `vpermt2ps`/`vshufps` on AVX-512, a few instructions per vector) replace
the W*W element inserts a compound literal of lanes compiles to (about 30 instructions per vector with GCC 12).
GCC spells a two-input shuffle `__builtin_shuffle(a, b, mask)` (the mask an integer vector of the lane width),
Clang `__builtin_shufflevector(a, b, i0, ...)`; both are generic vector builtins, so the helper is portable C.
"""

from __future__ import annotations


def _stage_masks(width: int) -> list[tuple[int, int, list[int], list[int]]]:
    """(h, r, the mask of out[r], the mask of out[r + h]) for every stage and pair; lanes >= width pick from b."""
    out = []
    h = width // 2
    while h >= 1:
        for r in range(width):
            if r & h:
                continue
            low = [c if not c & h else width + c - h for c in range(width)]
            high = [c + h if not c & h else width + c for c in range(width)]
            out.append((h, r, low, high))
        h //= 2
    return out


def transpose_helper(name: str, width: int) -> str:
    """The C source of `plygrad_transpose_<name minus plygrad_>` for the vector type `name` of `width` lanes (its
    `<name>_mask` integer type is declared beside it by c_types.vector_typedefs)."""
    suffix = name[len("plygrad_"):]
    lines = [f"static inline void plygrad_transpose_{suffix}({name}* m) {{"]
    current = [f"m[{r}]" for r in range(width)]  # the C value holding each row after the stages so far
    count = 0
    for h, r, low, high in _stage_masks(width):  # the pairs of one stage touch disjoint rows
        a, b = current[r], current[r + h]
        for target, mask in ((r, low), (r + h, high)):
            lanes = ", ".join(str(i) for i in mask)
            lines.append(f"  {name} t{count} = PLYGRAD_SHUFFLE({name}, {a}, {b}, {lanes});")
            current[target] = f"t{count}"
            count += 1
    for r in range(width):
        lines.append(f"  m[{r}] = {current[r]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


SHUFFLE_MACRO = """#ifndef PLYGRAD_SHUFFLE
#ifdef __clang__
#define PLYGRAD_SHUFFLE(T, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define PLYGRAD_SHUFFLE(T, a, b, ...) __builtin_shuffle(a, b, (T##_mask){__VA_ARGS__})
#endif
#endif
"""
