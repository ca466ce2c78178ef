/* The life of a cuMem handle (vmm_handle.h): made by cuMemCreate,
 * cuMulticastCreate or an import, held by the caller, by every mapping and by
 * every multicast binding, freed with its last reference. */
#include <stdlib.h>
#include <unistd.h>

#include "vmm_handle.h"

fc_vmm_handle *fc_vmm_handle_of(CUmemGenericAllocationHandle h)
{
    fc_vmm_handle *v = (fc_vmm_handle *)(uintptr_t)h;
    return v && v->magic == VMM_MAGIC ? v : NULL;
}

void fc_vmm_handle_ref(fc_vmm_handle *v) { atomic_fetch_add(&v->refs, 1); }

void fc_vmm_handle_unref(fc_vmm_handle *v)
{
    if (atomic_fetch_sub(&v->refs, 1) != 1) return;
    if (v->on_free) v->on_free(v);
    close(v->fd);
    if (v->counted) fc_mem_unreserve(v->prop.location.id, v->size);
    v->magic = 0;
    free(v);
}

fc_vmm_handle *fc_vmm_handle_new(int fd, size_t size, const CUmemAllocationProp *prop, bool counted)
{
    fc_vmm_handle *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->magic = VMM_MAGIC;
    v->fd = fd;
    v->size = size;
    v->prop = *prop;
    v->counted = counted;
    atomic_store(&v->refs, 1);
    return v;
}
