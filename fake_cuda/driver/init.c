/* cuInit, driver version, and small shared utilities. */
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>

#include "internal.h"

static const fc_platform *platform;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Every allocation is a memfd, and NCCL makes thousands: lift the soft limit. */
static void raise_fd_limit(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

static void do_init(void)
{
    platform = fc_platform_get();
    raise_fd_limit();
}

FC_API CUresult cuInit(unsigned int flags)
{
    if (flags != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"flags\":%u", flags);
    pthread_once(&init_once, do_init);
    /* A configuration that does not parse leaves no devices (reason already on stderr). */
    API_RETURN(platform ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE, "\"flags\":0");
}

CUresult fc_check_init(void)
{
    return platform ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

const fc_platform *fc_current_platform(void) { return platform; }

int fc_device_count(void) { return platform ? platform->ngpus : 0; }

bool fc_valid_device(CUdevice d) { return platform && d >= 0 && d < platform->ngpus; }

FC_API CUresult cuDriverGetVersion(int *version)
{
    if (!version) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    /* Answered before cuInit too, as the real driver does. */
    const fc_platform *p = platform ? platform : fc_platform_get();
    *version = p ? p->driver_version : 13000;
    API_RETURN(CUDA_SUCCESS, "\"version\":%d", *version);
}

uint64_t fc_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

unsigned long long fc_next_id(void)
{
    static atomic_ullong next = 1;
    return atomic_fetch_add(&next, 1);
}
