/* The NVML functions of nvml_functions.def that the simulated platform does not
 * offer (D, S, H rows), and a link-time check that every I row is implemented.
 *
 * A stub declares only the arguments it reads (none, or the leading handle):
 * on the LP64 ABIs this library is built for (x86-64 SysV, AArch64) arguments
 * travel in registers or caller-owned stack and the caller cleans up, so a
 * callee may ignore trailing ones. The outputs are never written: every stub
 * answers an error. */
#include "nvml_internal.h"

static nvmlReturn_t device_not_supported(nvmlDevice_t device)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    return r ? r : NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t system_not_supported(void)
{
    nvmlReturn_t r = fcn_check_init();
    return r ? r : NVML_ERROR_NOT_SUPPORTED;
}

/* No vGPU, MIG instance, unit, event set or GPM sample is ever created, so
 * every such handle (or vGPU type id) a caller passes is invalid. */
static nvmlReturn_t foreign_handle(void)
{
    nvmlReturn_t r = fcn_check_init();
    return r ? r : NVML_ERROR_INVALID_ARGUMENT;
}

#define I(name)
#define D(name) \
    NVML_API nvmlReturn_t name(nvmlDevice_t device) { return device_not_supported(device); }
#define S(name) \
    NVML_API nvmlReturn_t name(void) { return system_not_supported(); }
#define H(name) \
    NVML_API nvmlReturn_t name(void) { return foreign_handle(); }
#include "nvml_functions.def"
#undef I
#undef D
#undef S
#undef H

/* Every I row must be defined in some nvml_*.c: the table refers to each, so
 * a missing one fails the link (-Wl,--no-undefined). Only addresses are taken;
 * the declared type is never called through. */
#define I(name) extern void name(void);
#define D(name)
#define S(name)
#define H(name)
#include "nvml_functions.def"
#undef I

#define I(name) (const void *)name,
__attribute__((used)) static const void *const implemented[] = {
#include "nvml_functions.def"
};
