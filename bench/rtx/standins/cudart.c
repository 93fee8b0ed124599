/* Stand-in libcudart.so.12 for bench/rtx: FAKE. It describes one CUDA device of compute
 * capability 8.9 (an RTX 40-series, Ada) that does not exist. Why: the TensorRT-RTX
 * execution provider lists a device only when the CUDA runtime reports one, even when
 * it builds ahead of time for a named architecture (nv_target_sm) and never touches the
 * GPU. Creating and destroying handles (memory pools, streams, events) succeeds with
 * fake handles, because the plugin creates a memory pool when it is registered; every
 * call that would need a real device (allocating, copying, synchronizing on work,
 * launching graphs) fails with cudaErrorNoDevice (100); the generator (bench/rtx/standins.py) adds those
 * as stubs for every cuda* symbol the plugin imports that this file does not define.
 * Never used by trtpipe itself: only by the bench/rtx oracle in a child process. */
#include <stddef.h>
#include <string.h>

#define OK 0
#define NO_DEVICE 100
#define INVALID_DEVICE 101

typedef struct { char bytes[16]; } uuid16;

/* cudaDeviceProp as laid out by CUDA 12.x (driver_types.h): the fields up to
 * unifiedFunctionPointers, then 63 reserved ints (1032 bytes in all). */
struct prop12 {
    char name[256]; uuid16 uuid; char luid[8]; unsigned int luidDeviceNodeMask;
    size_t totalGlobalMem; size_t sharedMemPerBlock; int regsPerBlock; int warpSize;
    size_t memPitch; int maxThreadsPerBlock; int maxThreadsDim[3]; int maxGridSize[3];
    int clockRate; size_t totalConstMem; int major; int minor; size_t textureAlignment;
    size_t texturePitchAlignment; int deviceOverlap; int multiProcessorCount;
    int kernelExecTimeoutEnabled; int integrated; int canMapHostMemory; int computeMode;
    int maxTexture1D; int maxTexture1DMipmap; int maxTexture1DLinear; int maxTexture2D[2];
    int maxTexture2DMipmap[2]; int maxTexture2DLinear[3]; int maxTexture2DGather[2];
    int maxTexture3D[3]; int maxTexture3DAlt[3]; int maxTextureCubemap;
    int maxTexture1DLayered[2]; int maxTexture2DLayered[3]; int maxTextureCubemapLayered[2];
    int maxSurface1D; int maxSurface2D[2]; int maxSurface3D[3]; int maxSurface1DLayered[2];
    int maxSurface2DLayered[3]; int maxSurfaceCubemap; int maxSurfaceCubemapLayered[2];
    size_t surfaceAlignment; int concurrentKernels; int ECCEnabled; int pciBusID;
    int pciDeviceID; int pciDomainID; int tccDriver; int asyncEngineCount;
    int unifiedAddressing; int memoryClockRate; int memoryBusWidth; int l2CacheSize;
    int persistingL2CacheMaxSize; int maxThreadsPerMultiProcessor;
    int streamPrioritiesSupported; int globalL1CacheSupported; int localL1CacheSupported;
    size_t sharedMemPerMultiprocessor; int regsPerMultiprocessor; int managedMemory;
    int isMultiGpuBoard; int multiGpuBoardGroupID; int hostNativeAtomicSupported;
    int singleToDoublePrecisionPerfRatio; int pageableMemoryAccess;
    int concurrentManagedAccess; int computePreemptionSupported;
    int canUseHostPointerForRegisteredMem; int cooperativeLaunch;
    int cooperativeMultiDeviceLaunch; size_t sharedMemPerBlockOptin;
    int pageableMemoryAccessUsesHostPageTables; int directManagedMemAccessFromHost;
    int maxBlocksPerMultiProcessor; int accessPolicyMaxWindowSize;
    size_t reservedSharedMemPerBlock; int hostRegisterSupported;
    int sparseCudaArraySupported; int hostRegisterReadOnlySupported;
    int timelineSemaphoreInteropSupported; int memoryPoolsSupported;
    int gpuDirectRDMASupported; unsigned int gpuDirectRDMAFlushWritesOptions;
    int gpuDirectRDMAWritesOrdering; unsigned int memoryPoolSupportedHandleTypes;
    int deferredMappingCudaArraySupported; int ipcEventSupported; int clusterLaunch;
    int unifiedFunctionPointers; int reserved[63];
};
_Static_assert(sizeof(struct prop12) == 1032, "cudaDeviceProp of CUDA 12 is 1032 bytes");

/* The fake device: values of an RTX 4090 (AD102), the bus id the fake sysfs entry names. */
#define SM_MAJOR 8
#define SM_MINOR 9
#define SMS 128
#define PCI_DOMAIN 0
#define PCI_BUS 1
#define PCI_DEVICE 0
static const char *DEVICE_NAME = "Stand-in RTX device (no GPU; bench/rtx)";

static int current = 0;
static int last_error = OK;

int cudaGetDeviceCount(int *count) { if (count) *count = 1; return OK; }
int cudaGetDevice(int *device) { if (device) *device = current; return OK; }
int cudaSetDevice(int device) { if (device != 0) return INVALID_DEVICE; current = 0; return OK; }
int cudaRuntimeGetVersion(int *version) { if (version) *version = 12090; return OK; }
int cudaGetLastError(void) { int e = last_error; last_error = OK; return e; }
int cudaDeviceSynchronize(void) { return OK; }

int cudaDeviceGetByPCIBusId(int *device, const char *bus_id) {
    (void)bus_id;  /* one device: every bus id names it */
    if (device) *device = 0;
    return OK;
}

int cudaGetDeviceProperties_v2(struct prop12 *p, int device) {
    if (device != 0) return INVALID_DEVICE;
    memset(p, 0, sizeof *p);
    strncpy(p->name, DEVICE_NAME, sizeof p->name - 1);
    p->totalGlobalMem = (size_t)24 << 30;
    p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = 99 << 10;
    p->sharedMemPerMultiprocessor = 100 << 10;
    p->regsPerBlock = 65536; p->regsPerMultiprocessor = 65536;
    p->warpSize = 32; p->maxThreadsPerBlock = 1024; p->maxThreadsPerMultiProcessor = 1536;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->major = SM_MAJOR; p->minor = SM_MINOR; p->multiProcessorCount = SMS;
    p->l2CacheSize = 72 << 20; p->maxBlocksPerMultiProcessor = 24;
    p->pciDomainID = PCI_DOMAIN; p->pciBusID = PCI_BUS; p->pciDeviceID = PCI_DEVICE;
    p->unifiedAddressing = 1; p->managedMemory = 1; p->concurrentKernels = 1;
    p->memoryPoolsSupported = 1; p->asyncEngineCount = 2; p->canMapHostMemory = 1;
    return OK;
}

int cudaDeviceGetAttribute(int *value, int attr, int device) {
    if (device != 0) return INVALID_DEVICE;
    int v = 0;
    switch (attr) {
    case 1: v = 1024; break;              /* MaxThreadsPerBlock */
    case 10: v = 32; break;               /* WarpSize */
    case 16: v = SMS; break;              /* MultiProcessorCount */
    case 33: v = PCI_BUS; break;          /* PciBusId */
    case 34: v = PCI_DEVICE; break;       /* PciDeviceId */
    case 38: v = 72 << 20; break;         /* L2CacheSize */
    case 39: v = 1536; break;             /* MaxThreadsPerMultiProcessor */
    case 41: v = 1; break;                /* UnifiedAddressing */
    case 50: v = PCI_DOMAIN; break;       /* PciDomainId */
    case 75: v = SM_MAJOR; break;         /* ComputeCapabilityMajor */
    case 76: v = SM_MINOR; break;         /* ComputeCapabilityMinor */
    case 97: v = 99 << 10; break;         /* MaxSharedMemoryPerBlockOptin */
    case 115: v = 1; break;               /* MemoryPoolsSupported */
    default: v = 0;
    }
    if (value) *value = v;
    return OK;
}

const char *cudaGetErrorName(int error) {
    return error == OK ? "cudaSuccess" : error == NO_DEVICE ? "cudaErrorNoDevice" : "cudaErrorUnknown";
}

const char *cudaGetErrorString(int error) {
    return error == OK ? "no error"
         : "stand-in CUDA runtime (bench/rtx): no real device, this call needs one";
}

/* Handles: the plugin creates a memory pool (and may create streams and events) when it is
 * registered or a session starts. They are fake, distinct, non-null and never used for work. */
static char handles[64];
static int next_handle = 0;
static void *new_handle(void) { return &handles[(next_handle++) % 64]; }

int cudaMemPoolCreate(void **pool, const void *props) { (void)props; *pool = new_handle(); return OK; }
int cudaMemPoolDestroy(void *pool) { (void)pool; return OK; }
int cudaMemPoolSetAttribute(void *pool, int attr, void *value) { (void)pool; (void)attr; (void)value; return OK; }
int cudaMemPoolGetAttribute(void *pool, int attr, void *value) {
    (void)pool; (void)attr; if (value) memset(value, 0, 8); return OK;
}
int cudaMemPoolTrimTo(void *pool, size_t keep) { (void)pool; (void)keep; return OK; }
int cudaStreamCreateWithFlags(void **stream, unsigned int flags) { (void)flags; *stream = new_handle(); return OK; }
int cudaStreamDestroy(void *stream) { (void)stream; return OK; }
int cudaEventCreateWithFlags(void **event, unsigned int flags) { (void)flags; *event = new_handle(); return OK; }
int cudaEventDestroy(void *event) { (void)event; return OK; }
