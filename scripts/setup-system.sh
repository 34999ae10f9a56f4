#!/usr/bin/env bash
# System packages plygrad needs that pip cannot install:
# - a C compiler for the CPU backend (plygrad-cpu compiles every kernel with it, and the codegen tests compile the C
#   they render);
# - a C++20 compiler (g++) for the tests that run rendered CUDA and HIP on the CPU (packages/codegen/tests/cuda_emu.h);
# - clang-19 and lld-19 (Debian packages) for the AMD checks: the hip renderer's kernels are compiled offline to
#   AMDGPU code objects for gfx90a, gfx942 and gfx1100 (`clang-19 -x hip --offload-arch=... -nogpulib -nogpuinc`,
#   linked by ld.lld-19); plygrad-amd compiles with them too where a machine has no ROCm. The Metal check uses its
#   clang++-19 too (`-fsyntax-only` on every rendered MSL kernel, packages/codegen/tests/metal_emu.py).
# - a headless Chromium (Debian's chromium-headless-shell, else chromium) for the browser tests of plygrad-viz's
#   report (tests/test_viz.py, packages/viz/tests: `--dump-dom` and `--screenshot`); optional: a failed install is
#   reported and those tests skip saying so.
# nvcc (the CUDA toolkit, for compiling every test kernel to a cubin) comes with the machine image: it is not a
# Debian package we can install here, so its absence is only reported (those tests then fail, by design).
# Does nothing when everything is there. Runs as root on the project's machines (apt-get); elsewhere it says what
# to install instead.
set -euo pipefail

missing=()
if ! command -v "${CC:-cc}" >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1 && ! command -v clang >/dev/null 2>&1; then
    missing+=(gcc libc6-dev)
fi
if ! command -v "${CXX:-g++}" >/dev/null 2>&1; then
    missing+=(g++)
fi
if ! command -v clang-19 >/dev/null 2>&1; then
    missing+=(clang-19)
fi
if ! command -v ld.lld-19 >/dev/null 2>&1; then
    missing+=(lld-19)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup-system: installing ${missing[*]} with apt-get"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "setup-system: missing ${missing[*]}; install them (the CPU backend, the CUDA/HIP emulation tests and the AMD code-object checks need them)" >&2
        exit 1
    fi
fi
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ] && ! ls /usr/local/cuda-*/bin/nvcc >/dev/null 2>&1; then
    echo "setup-system: note: nvcc (CUDA toolkit) not found; the cubin compile checks will fail" >&2
fi
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1 \
        && [ ! -x /usr/lib/chromium/chrome-headless-shell ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup-system: installing chromium-headless-shell with apt-get"
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                chromium-headless-shell >/dev/null; }; then
            echo "setup-system: note: chromium-headless-shell did not install; the viz browser test will skip" >&2
        fi
    else
        echo "setup-system: note: no chromium found; install chromium-headless-shell for the viz browser test" >&2
    fi
fi
