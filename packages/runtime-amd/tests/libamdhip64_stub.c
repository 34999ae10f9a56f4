/* A C library with libamdhip64's ABI for the functions plygrad-amd declares, so the tests call through ctypes exactly
   as with the real runtime: the prototypes (argument widths, pointers, NULL streams, the `extra` list) are what is
   under test. One "GPU" (gfx942); device memory is host memory; a launch records its dimensions and the argument
   buffer for `stub_last_launch`. Only the plain hipGetDeviceProperties (ROCm 5's name) is exported. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;

static uint64_t last[24]; /* grid xyz, block xyz, then the argument buffer as 8-byte values */
static int last_count;
static int current = -1;

const char *hipGetErrorName(hipError_t e) {
  switch (e) {
    case 2: return "hipErrorOutOfMemory";
    case 100: return "hipErrorNoDevice";
    case 500: return "hipErrorNotFound";
  }
  return "hipErrorUnknown";
}
const char *hipGetErrorString(hipError_t e) { return e == 2 ? "out of memory" : ""; }
hipError_t hipInit(unsigned flags) { return flags == 0 ? 0 : 1; }
hipError_t hipRuntimeGetVersion(int *v) { *v = 60241134; return 0; }
hipError_t hipGetDeviceCount(int *n) { *n = 1; return 0; }
hipError_t hipSetDevice(int d) { if (d != 0) return 101; current = d; return 0; }
hipError_t hipDeviceGetName(char *name, int len, int dev) { (void)dev; strncpy(name, "Stub Instinct", (size_t)len); return 0; }
hipError_t hipGetDeviceProperties(void *props, int dev) {
  if (dev != 0) return 101;
  memset(props, 0, 1024);
  strcpy((char *)props, "Stub Instinct");
  strcpy((char *)props + 396, "gfx942:sramecc+:xnack-");
  return 0;
}
hipError_t hipDeviceSynchronize(void) { return current == 0 ? 0 : 1; }
hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total) { *free_bytes = (size_t)2 << 30; *total = (size_t)64 << 30; return 0; }
hipError_t hipMalloc(void **p, size_t n) {
  if (n > ((size_t)2 << 30)) return 2;
  void *mem = NULL;
  if (posix_memalign(&mem, 256, n) != 0) return 2;
  memset(mem, 0, n);
  *p = mem;
  return 0;
}
hipError_t hipFree(void *p) { free(p); return 0; }
hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) {
  if (kind < 1 || kind > 3) return 1;
  memcpy(dst, src, n);
  return 0;
}
hipError_t hipMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n) { (void)dd; (void)sd; memcpy(dst, src, n); return 0; }
hipError_t hipModuleLoadData(void **module, const void *image) {
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200;
  *module = (void *)0x1000;
  return 0;
}
hipError_t hipModuleUnload(void *module) { return module == (void *)0x1000 ? 0 : 1; }
hipError_t hipModuleGetFunction(void **f, void *module, const char *name) {
  (void)module;
  if (strcmp(name, "kernel") != 0) return 500;
  *f = (void *)0x2000;
  return 0;
}
hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, void *stream, void **params, void **extra) {
  if (f != (void *)0x2000 || shared != 0 || stream != NULL || params != NULL) return 1;
  if (extra[0] != (void *)1 || extra[2] != (void *)2 || extra[4] != (void *)3) return 1;
  size_t size = *(size_t *)extra[3];
  uint64_t dims[6] = {gx, gy, gz, bx, by, bz};
  memcpy(last, dims, sizeof dims);
  if (size % 8 != 0 || size / 8 > 18) return 1;
  memcpy(last + 6, extra[1], size);
  last_count = 6 + (int)(size / 8);
  return 0;
}
hipError_t hipEventCreate(void **e) { *e = malloc(1); return 0; }
hipError_t hipEventRecord(void *e, void *stream) { return e && !stream ? 0 : 1; }
hipError_t hipEventSynchronize(void *e) { return e ? 0 : 1; }
hipError_t hipEventElapsedTime(float *ms, void *start, void *end) { *ms = start != end ? 2.5f : 0.0f; return 0; }
hipError_t hipEventDestroy(void *e) { free(e); return 0; }

/* for the test: what the last launch received */
int stub_last_launch(uint64_t *out) { memcpy(out, last, sizeof(uint64_t) * (size_t)last_count); return last_count; }
