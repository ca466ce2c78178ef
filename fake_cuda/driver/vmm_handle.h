/* A cuMem handle (CUmemGenericAllocationHandle): a physical allocation
 * (cuMemCreate, or imported from another process), or a multicast object
 * (cuMulticastCreate, or imported). Shared by vmm.c, which maps and shares
 * handles, and multicast.c, which binds memory to multicast objects. */
#ifndef NCCLSIM_DRIVER_VMM_HANDLE_H
#define NCCLSIM_DRIVER_VMM_HANDLE_H

#include "internal.h"

struct fc_mc_local; /* multicast.c */

struct fc_vmm_handle;
typedef struct fc_vmm_handle {
    uint32_t magic;
    int fd;      /* the memfd of the memory, or of the multicast object's shared state */
    size_t size; /* bytes of memory; for a multicast object, the size bound per device */
    CUmemAllocationProp prop;
    atomic_int refs; /* the handle itself + one per mapping + one per multicast binding */
    bool counted;    /* counts against its device's capacity */
    struct fc_mc_local *mc; /* NULL: memory */
    void (*on_free)(struct fc_vmm_handle *v); /* what its maker frees with it (multicast.c) */
} fc_vmm_handle;
#define VMM_MAGIC 0x766d6d68u

#define FC_VMM_GRANULARITY (2u << 20)

/* vmm_handle.c */
fc_vmm_handle *fc_vmm_handle_of(CUmemGenericAllocationHandle h); /* NULL when not a live handle */
fc_vmm_handle *fc_vmm_handle_new(int fd, size_t size, const CUmemAllocationProp *prop, bool counted);
void fc_vmm_handle_ref(fc_vmm_handle *v);
void fc_vmm_handle_unref(fc_vmm_handle *v); /* the last reference frees it */

/* multicast.c */
/* The multicast object whose shared state is the memfd `fd` (another
 * process's export): a new handle, or NULL when fd is no multicast object. */
fc_vmm_handle *fc_mc_import(int fd);
void fc_mc_unmapped(uintptr_t base, size_t size); /* a multicast mapping went */

#endif
