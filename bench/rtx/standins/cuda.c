/* Stand-in libcuda.so.1 (the CUDA driver API) for bench/rtx: FAKE. There is no NVIDIA
 * driver on this machine; the TensorRT-RTX plugin links libcuda.so.1 and would not load
 * without it. Every driver call answers CUDA_ERROR_NO_DEVICE (100): building ahead of
 * time for a named architecture (nv_target_sm) makes no driver call, so nothing here
 * is expected to run; if one is made, it fails loudly instead of pretending.
 * The generator (bench/rtx/standins.py) adds a stub for every other cu* symbol imported. */
#define NO_DEVICE 100
static const char *MESSAGE = "stand-in CUDA driver (bench/rtx): no device";
int cuGetErrorString(int error, const char **text) { (void)error; if (text) *text = MESSAGE; return 0; }
int cuGetErrorName(int error, const char **text) { (void)error; if (text) *text = "CUDA_ERROR_NO_DEVICE"; return 0; }
int cuDriverGetVersion(int *version) { if (version) *version = 0; return NO_DEVICE; }
