/* A C library with libcuda's ABI for the functions plygrad-nv declares, so the tests call through ctypes exactly
   as with the real driver: the prototypes (argument widths, pointers, NULL streams) are what is under test.
   One "GPU"; device memory is host memory; a launch records its dimensions and arguments for `stub_last_launch`. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;

static uint64_t last[16];  /* grid xyz, block xyz, then each argument read as 8 bytes */
static int last_count;
static int param_sizes[8] = {8, 8, 8};
static int n_params = 3;
static void *current;

CUresult cuGetErrorName(CUresult e, const char **out) {
  if (e == 2) { *out = "CUDA_ERROR_OUT_OF_MEMORY"; return 0; }
  if (e == 500) { *out = "CUDA_ERROR_NOT_FOUND"; return 0; }
  return 1;
}
CUresult cuGetErrorString(CUresult e, const char **out) { (void)e; (void)out; return 1; }
CUresult cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char *name, int len, int dev) { (void)dev; strncpy(name, "Stub GPU", (size_t)len); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  switch (attr) {
    case 1: case 2: case 3: *v = 1024; return 0;
    case 4: *v = 64; return 0;
    case 5: *v = 2147483647; return 0;
    case 6: case 7: *v = 65535; return 0;
    case 8: *v = 49152; return 0;
    case 16: *v = 132; return 0;
    case 75: *v = 9; return 0;
    case 76: *v = 0; return 0;
  }
  return 1;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = (void *)0xC0; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { current = ctx; return 0; }
CUresult cuCtxSynchronize(void) { return current ? 0 : 201; }
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { *free_bytes = (size_t)2 << 30; *total = (size_t)80 << 30; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  if (n > ((size_t)2 << 30)) return 2;
  void *mem = calloc(1, n);
  *p = (CUdeviceptr)(uintptr_t)mem;
  return mem ? 0 : 2;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { memcpy((void *)(uintptr_t)dst, src, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { memcpy(dst, (void *)(uintptr_t)src, n); return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  memcpy((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  return 0;
}
CUresult cuMemcpyPeer(CUdeviceptr dst, void *dc, CUdeviceptr src, void *sc, size_t n) {
  (void)dc; (void)sc;
  return cuMemcpyDtoD_v2(dst, src, n);
}
CUresult cuModuleLoadData(void **module, const void *image) {
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200;
  *module = (void *)0x1000;
  return 0;
}
CUresult cuModuleUnload(void *module) { return module == (void *)0x1000 ? 0 : 1; }
CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
  (void)module;
  if (strcmp(name, "kernel") != 0) return 500;
  *f = (void *)0x2000;
  return 0;
}
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *offset, size_t *size) {
  (void)f;
  if (i >= (size_t)n_params) return 1;
  *offset = 8 * i;
  *size = (size_t)param_sizes[i];
  return 0;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  if (f != (void *)0x2000 || shared != 0 || stream != NULL || extra != NULL) return 1;
  uint64_t dims[6] = {gx, gy, gz, bx, by, bz};
  memcpy(last, dims, sizeof dims);
  for (int i = 0; i < n_params; i++) {
    last[6 + i] = param_sizes[i] == 4 ? (uint64_t)(int64_t)*(int32_t *)params[i] : *(uint64_t *)params[i];
  }
  last_count = 6 + n_params;
  return 0;
}
CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; *e = malloc(1); return 0; }
CUresult cuEventRecord(void *e, void *stream) { return e && !stream ? 0 : 1; }
CUresult cuEventSynchronize(void *e) { return e ? 0 : 1; }
CUresult cuEventElapsedTime(float *ms, void *start, void *end) { *ms = start != end ? 2.5f : 0.0f; return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }

/* for the test: the kernel's parameter widths, and what the last launch received */
void stub_set_params(int n, const int *sizes) { n_params = n; memcpy(param_sizes, sizes, sizeof(int) * (size_t)n); }
int stub_last_launch(uint64_t *out) { memcpy(out, last, sizeof(uint64_t) * (size_t)last_count); return last_count; }
