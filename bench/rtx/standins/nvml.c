/* Stand-in libnvidia-ml.so.1 (NVML) for bench/rtx: FAKE. Linked by the TensorRT-RTX plugin;
 * there is no driver here, so every call answers NVML_ERROR_DRIVER_NOT_LOADED (9).
 * The generator (bench/rtx/standins.py) adds a stub for every other nvml* symbol imported. */
#define DRIVER_NOT_LOADED 9
const char *nvmlErrorString(int result) { (void)result; return "stand-in NVML (bench/rtx): no driver"; }
