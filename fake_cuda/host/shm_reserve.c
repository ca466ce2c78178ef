/* Part of libncclsim-host.so. NCCL makes each shared-memory segment a
 * /dev/shm file it extends with fallocate(fd, 0, 0, size), which allocates
 * every page, and then zeroes the whole mapping, where zero_fill.c punches
 * the pages out again. At 128 x 8 simulated GPUs on one machine each rank's
 * proxy makes a 34 MB segment while memory is nearly full: the allocation,
 * only to be given back, failed (ENOMEM) and NCCL's init with it.
 * Here NCCL's fallocate of a tmpfs file (mode 0) only sets the file's size:
 * its pages exist once written, as after the hole punching. Any other
 * caller, file or mode gets the real fallocate. */
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "interpose.h"

static bool on_tmpfs(int fd)
{
    struct statfs fs;
    return fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

EXPORT int fallocate(int fd, int mode, off_t offset, off_t len)
{
    REAL(fallocate);
    if (mode != 0 || offset < 0 || len <= 0 || !(host_caller(__builtin_return_address(0)) & HOST_CALLER_NCCL) ||
        !on_tmpfs(fd))
        return fn_(fd, mode, offset, len);
    struct stat st;
    if (fstat(fd, &st) != 0) return fn_(fd, mode, offset, len);
    if (st.st_size >= offset + len) return 0;
    return ftruncate(fd, offset + len);
}
