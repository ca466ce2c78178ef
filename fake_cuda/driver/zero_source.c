/* Zeros standing in for simulated memory that holds none (device_link.h).
 *
 * Simulated memory is a memfd: a page nobody wrote is a hole, which reads
 * as zeros, but the first read of it through a mapping allocates and
 * clears a page all the same (tmpfs has no shared zero page), 3 to 14 us
 * per 4 KiB page on a virtual machine. Programs whose own kernels fill
 * their inputs (nccl-tests, a framework's tensors) leave those inputs
 * holes here, since the simulated GPU does not run their kernels: a
 * collective's first pass over 128 MiB inputs on 16 GPUs faulted in 2 GiB
 * of zeros. Reading a hole's bytes from a read-only private anonymous
 * mapping instead gives the same zeros from the kernel's zero page (its
 * 2 MiB one where transparent huge pages may be used), holding no memory.
 *
 * The stand-in keeps the address's offset within 2 MiB, so alignment is as
 * the original's. References to it (memory_refs.c) name no file: a reader
 * in another process reads its own stand-in. */
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* The reserved span: virtual only, 16 GiB of address space (a private
 * read-only mapping is not charged against the commit limit). */
#define ZERO_SPAN ((size_t)16 << 30)
#define ZERO_ALIGN ((size_t)2 << 20)
/* Ranges smaller than this are read in place: the check costs a system call. */
#define STAND_IN_MIN ((size_t)1 << 20)

static char *zero_base; /* ZERO_ALIGN-aligned, ZERO_SPAN long; NULL: none */
static pthread_once_t zero_once = PTHREAD_ONCE_INIT;

static void reserve(void)
{
    size_t len = ZERO_SPAN + ZERO_ALIGN;
    char *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return;
    char *base = (char *)(((uintptr_t)p + ZERO_ALIGN - 1) & ~(uintptr_t)(ZERO_ALIGN - 1));
    madvise(base, ZERO_SPAN, MADV_HUGEPAGE); /* refused where huge pages are off: 4 KiB zero pages then */
    __atomic_store_n(&zero_base, base, __ATOMIC_RELEASE); /* fc_zero_offset reads it without the once */
}

static char *zeros(void)
{
    pthread_once(&zero_once, reserve);
    return zero_base;
}

const void *fc_zero_at(uint64_t offset, size_t len)
{
    char *z = zeros();
    return z && offset <= ZERO_SPAN && len <= ZERO_SPAN - offset ? z + offset : NULL;
}

bool fc_zero_offset(uintptr_t addr, uint64_t *offset)
{
    char *z = __atomic_load_n(&zero_base, __ATOMIC_ACQUIRE); /* none reserved: no address is in it */
    if (!z || addr < (uintptr_t)z || addr - (uintptr_t)z >= ZERO_SPAN) return false;
    *offset = addr - (uintptr_t)z;
    return true;
}

/* Addresses found with data after them: a program's inputs are mostly the
 * same few buffers, written, and each launch would ask again. Written
 * memory stays written (a zero fill writes pages in memory), so a stale
 * entry, after its memory went and an unwritten allocation came to the
 * same address, only makes that one read in place. */
#define WRITTEN_SLOTS 64
static uintptr_t written[WRITTEN_SLOTS];

static uintptr_t *written_slot(uintptr_t addr)
{
    return &written[((addr * 0x9e3779b97f4a7c15ull) >> 32) % WRITTEN_SLOTS];
}

uintptr_t fc_zero_stand_in(uintptr_t addr)
{
    if (__atomic_load_n(written_slot(addr), __ATOMIC_RELAXED) == addr) return 0;
    size_t span = fc_sim_memory_span(addr), lead = addr & (ZERO_ALIGN - 1), at;
    int fd;
    if (span < STAND_IN_MIN || span > ZERO_SPAN - lead || !fc_backing_fd(addr, span, &fd, &at)) return 0;
    off_t from = (off_t)at;
    off_t data = lseek(fd, from, SEEK_DATA); /* swapped-out pages count as data */
    bool hole = data < 0 ? errno == ENXIO : (size_t)(data - from) >= span;
    if (!hole && data >= 0) __atomic_store_n(written_slot(addr), addr, __ATOMIC_RELAXED);
    const char *z = hole ? fc_zero_at(lead, span) : NULL;
    return (uintptr_t)z;
}
