/* cuGetErrorName / cuGetErrorString. */
#include "internal.h"

#define ERRORS(E)                                                                               \
    E(CUDA_SUCCESS, "no error")                                                                 \
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                             \
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                \
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                       \
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                         \
    E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool")    \
    E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")                                 \
    E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable")       \
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                               \
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                      \
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                               \
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                     \
    E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")                            \
    E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed")                                 \
    E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed")                             \
    E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")                                     \
    E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device") \
    E(CUDA_ERROR_NOT_MAPPED, "resource not mapped")                                             \
    E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture")              \
    E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread") \
    E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices") \
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                                   \
    E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid")                              \
    E(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                                              \
    E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")      \
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                     \
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")       \
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                           \
    E(CUDA_ERROR_NOT_READY, "device not ready")                                                 \
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")                   \
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")            \
    E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated")                     \
    E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled")                 \
    E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled")                   \
    E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process")   \
    E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                                  \
    E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped") \
    E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region") \
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                                   \
    E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                      \
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                      \
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing") \
    E(CUDA_ERROR_TIMEOUT, "wait operation timed out")                                           \
    E(CUDA_ERROR_UNKNOWN, "unknown error")

static const struct {
    CUresult code;
    const char *name, *text;
} errors[] = {
#define E(code, text) {code, #code, text},
    ERRORS(E)
#undef E
};

static int lookup(CUresult e)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e) return (int)i;
    return -1;
}

FC_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"error\":%d", error);
    int i = lookup(error);
    *pStr = i < 0 ? NULL : errors[i].name;
    API_RETURN(i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS, "\"error\":%d", error);
}

FC_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"error\":%d", error);
    int i = lookup(error);
    *pStr = i < 0 ? NULL : errors[i].text;
    API_RETURN(i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS, "\"error\":%d", error);
}
