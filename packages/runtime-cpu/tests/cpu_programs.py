"""Hand-written C programs that follow the C program contract (docs/ir.md, docs/design.md), and a stand-in lowering.

codegen is a separate distribution this package's tests may not install, so `hand_lowering` plays its part for
run_linear: it reads the kernel it is given (name, PARAMs, variables) and returns a PROGRAM whose source is the C
written here for that kernel name, exactly as a renderer would emit it.
"""

from __future__ import annotations

from typing import Final

from plygrad.ir import KernelInfo, Ops, ParamInfo, ProgramInfo, Stage, Target, UOp, deserialize, dtypes, serialize

PRELUDE: Final = "#include <math.h>\n#include <stdint.h>\n"

ADD: Final = PRELUDE + """
void add(float* restrict data0, const float* restrict data1, const float* restrict data2, long long n) {
  for (long long i = 0; i < n; i++) {
    data0[i] = data1[i] + data2[i];
  }
}
"""

# a prefix sum of 4 floats as codegen rendered it (compares and selects): GCC 12 at -O2 -march=native on an
# AVX-512 host vectorized it wrongly ([1, 0, 6, 10]); the backend's flags must keep it right
PREFIX_SUM: Final = PRELUDE + """
void prefix_sum(float* restrict data0, const float* restrict data1) {
  float v0 = data1[0LL];
  float v1 = data1[1LL];
  float v2 = data1[2LL];
  float v3 = data1[3LL];
  for (long long ridx0 = 0; ridx0 < 4LL; ridx0++) {
    long long v4 = (ridx0 / 2LL);
    _Bool v5 = (0LL < v4);
    int32_t v6 = (v5 ? ((int32_t)2LL) : ((int32_t)0LL));
    long long v7 = (ridx0 % 2LL);
    _Bool v8 = (0LL < v7);
    int32_t v9 = (v8 ? ((int32_t)1LL) : ((int32_t)0LL));
    int32_t v10 = ((int32_t)((uint32_t)v6 + (uint32_t)v9));
    _Bool v11 = (((int32_t)0LL) < v10);
    _Bool v12 = (v10 == ((int32_t)0LL));
    _Bool v13 = (v11 | v12);
    float v14 = (v13 ? v0 : 0x0.0p+0f);
    float v15 = (v14 + 0x0.0p+0f);
    _Bool v16 = (((int32_t)1LL) < v10);
    _Bool v17 = (v10 == ((int32_t)1LL));
    _Bool v18 = (v16 | v17);
    float v19 = (v18 ? v1 : 0x0.0p+0f);
    float v20 = (v15 + v19);
    _Bool v21 = (((int32_t)2LL) < v10);
    _Bool v22 = (v10 == ((int32_t)2LL));
    _Bool v23 = (v21 | v22);
    float v24 = (v23 ? v2 : 0x0.0p+0f);
    float v25 = (v20 + v24);
    _Bool v26 = (v10 == ((int32_t)3LL));
    float v27 = (v26 ? v3 : 0x0.0p+0f);
    float v28 = (v25 + v27);
    data0[ridx0] = v28;
  }
}
"""

# codegen's kernel for a padded, dilated 3-D window of x (2, 1, 4, 4, 3) times w (2, 2, 2), summed over the window
# (a conv3d with padding 1 and dilation (2, 1, 2)): GCC 12 at -O2 -mavx2 if-converted its guarded loads wrongly
# the sum of a reversed vector (`x.flip(0).sum()`) as codegen unrolls it by 4: GCC 12's loop vectorizer read the
# reversed group of loads in the wrong order inside the in-order float reduction (1024 elements summed to 89.7, not
# 57.7; see OPTIONAL_FLAGS in the compiler module)
REVERSED_SUM: Final = PRELUDE + """
void reversed_sum(float* restrict data0, const float* restrict data1, long long n) {
  float acc0 = 0x0.0p+0f;
  for (long long ridx0 = 0; ridx0 < n; ridx0++) {
    float v0 = acc0;
    long long v1 = (ridx0 * (-4LL));
    long long v2 = (v1 + (4LL * n - 1LL));
    float v3 = data1[v2];
    float v4 = (v0 + v3);
    long long v5 = (ridx0 * 4LL);
    long long v6 = (v5 + 1LL);
    long long v7 = (v6 * (-1LL));
    float v9 = data1[v7 + (4LL * n - 1LL)];
    float v10 = (v4 + v9);
    long long v12 = ((v5 + 2LL) * (-1LL));
    float v14 = data1[v12 + (4LL * n - 1LL)];
    float v15 = (v10 + v14);
    long long v17 = ((v5 + 3LL) * (-1LL));
    float v19 = data1[v17 + (4LL * n - 1LL)];
    float v20 = (v15 + v19);
    acc0 = v20;
  }
  data0[0LL] = acc0;
}
"""

WINDOW_SUM: Final = PRELUDE + """
void window_sum(float* restrict data0, const float* restrict data1, const float* restrict data2) {
  for (long long ridx0 = 0; ridx0 < 2LL; ridx0++) {
    long long v0 = (ridx0 * 60LL);
    long long v1 = (ridx0 * 48LL);
    for (long long ridx1 = 0; ridx1 < 4LL; ridx1++) {
      long long v2 = (ridx1 * 15LL);
      for (long long ridx2 = 0; ridx2 < 5LL; ridx2++) {
        long long v3 = (ridx2 * 3LL);
        for (long long ridx3 = 0; ridx3 < 3LL; ridx3++) {
          long long v4 = (ridx3 + v3);
          long long v5 = (v4 + v2);
          long long v6 = (v5 + v0);
          float acc0 = 0x0.0p+0f;
          _Bool v7 = (0LL < ridx3);
          long long v8 = (ridx3 + 2LL);
          _Bool v9 = (v8 < 4LL);
          for (long long ridx4 = 0; ridx4 < 2LL; ridx4++) {
            long long v10 = (ridx4 * 2LL);
            long long v11 = (ridx1 + v10);
            long long v12 = (v11 * 12LL);
            _Bool v13 = (0LL < v11);
            _Bool v14 = (v11 < 5LL);
            _Bool v15 = (v13 & v14);
            long long v16 = (ridx4 * 4LL);
            for (long long ridx5 = 0; ridx5 < 2LL; ridx5++) {
              float v17 = acc0;
              long long v18 = (ridx2 + ridx5);
              long long v19 = (v18 * 3LL);
              long long v20 = (v19 + ridx3);
              long long v21 = (v12 + v20);
              long long v22 = (v21 + v1);
              long long v23 = (v22 + (-16LL));
              _Bool v24 = (0LL < v18);
              _Bool v25 = (v15 & v24);
              _Bool v26 = (v18 < 5LL);
              _Bool v27 = (v25 & v26);
              _Bool v28 = (v27 & v7);
              float v29 = (v28 ? data1[v23] : 0x0.0p+0f);
              long long v30 = (ridx5 * 2LL);
              long long v31 = (v30 + v16);
              float v32 = data2[v31];
              float v33 = (v29 * v32);
              float v34 = (v17 + v33);
              long long v35 = (ridx3 + v19);
              long long v36 = (v35 + v12);
              long long v37 = (v36 + v1);
              long long v38 = (v37 + (-14LL));
              _Bool v39 = (v27 & v9);
              float v40 = (v39 ? data1[v38] : 0x0.0p+0f);
              long long v41 = (v31 + 1LL);
              float v42 = data2[v41];
              float v43 = (v40 * v42);
              float v44 = (v34 + v43);
              acc0 = v44;
            }
          }
          float v45 = acc0;
          data0[v6] = v45;
        }
      }
    }
  }
}
"""

ECHO: Final = PRELUDE + """
void echo(int64_t* restrict data0, long long a, long long b) {
  data0[0] = a;
  data0[1] = b;
}
"""

THREAD_IDS: Final = PRELUDE + """
#ifdef _OPENMP
#include <omp.h>
#endif
void thread_ids(int32_t* restrict data0, float* restrict data1) {
  #pragma omp parallel for
  for (long long i = 0; i < 65536; i++) {
#ifdef _OPENMP
    data0[i] = omp_get_thread_num();
#else
    data0[i] = 0;
#endif
    data1[i] = sqrtf((float)i);
  }
}
"""

BROKEN: Final = PRELUDE + """
void broken(float* restrict data0) {
  data0[0] = 1.0f;
  data0[1] = undeclared_name * 2;
}
"""

# sources for the kernels of plygrad.runtime.testing, keyed by their KernelInfo name; {size_N} come from PARAMs
KERNEL_SOURCES: Final = {
    "conformance_add": PRELUDE + """
void conformance_add(float* restrict data0, const float* restrict data1, const float* restrict data2) {
  for (long long i = 0; i < {size0}; i++) data0[i] = data1[i] + data2[i];
}
""",
    "conformance_row_sum": PRELUDE + """
void conformance_row_sum(float* restrict data0, const float* restrict data1) {
  #pragma omp parallel for
  for (long long r = 0; r < {size0}; r++) {
    float acc = 0.0f;
    for (long long c = 0; c < {size1} / {size0}; c++) acc += data1[r * ({size1} / {size0}) + c];
    data0[r] = acc;
  }
}
""",
    "conformance_scale": PRELUDE + """
void conformance_scale(float* restrict data0, const float* restrict data1, long long k) {
  for (long long i = 0; i < {size0}; i++) data0[i] = data1[i] * (float)k;
}
""",
    "conformance_padded": PRELUDE + """
void conformance_padded(int32_t* restrict data0, const int32_t* restrict data1) {
  for (long long i = 0; i < {size0}; i++) data0[i] = i < {size1} ? data1[i] : 0;
}
""",
}


def hand_lowering(kernel: bytes, target: bytes) -> bytes:
    """Stand-in for the `plygrad.codegen` entry point: KERNEL bytes + Target bytes -> PROGRAM bytes."""
    sink = deserialize(kernel, Stage.KERNEL)
    assert Target.from_bytes(target).renderer == "c"
    name = sink.arg.name if isinstance(sink.arg, KernelInfo) else ""
    nodes = sink.toposort
    params = sorted((n for n in nodes if n.op is Ops.PARAM), key=lambda p: p.arg)
    written = {n.src[0].src[0].arg for n in nodes if n.op is Ops.STORE}
    infos = tuple(ParamInfo(p.arg, p.dtype.base, p.dtype.size, p.arg in written)  # type: ignore[attr-defined]
                  for p in params)
    variables = sorted((n for n in nodes if n.op is Ops.DEFINE_VAR), key=lambda v: str(v.arg[0]))
    source = KERNEL_SOURCES[name]
    for info in infos:
        source = source.replace(f"{{size{info.index}}}", str(info.size))
    mem = sum(i.size * i.dtype.itemsize for i in infos)
    program_info = ProgramInfo(name, (1, 1, 1), None, infos, ops=infos[0].size, mem=mem)
    root = UOp(Ops.PROGRAM, dtypes.void, (UOp(Ops.SOURCE, dtypes.void, (), source), *variables), program_info)
    return serialize(root, Stage.PROGRAM)
