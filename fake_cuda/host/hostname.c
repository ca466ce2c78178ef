/* Part of libncclsim-host.so, preloaded into every rank of a simulated host: the
 * program sees the simulated host's name (NCCLSIM_HOSTNAME) from
 * gethostname() and uname(), so programs that derive their local rank from
 * the hostname (nccl-tests, torchrun) find their host's GPUs. Preloading,
 * rather than a UTS namespace, needs no privileges. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "interpose.h"

static const char *simulated_name(void)
{
    const char *n = getenv("NCCLSIM_HOSTNAME");
    return n && *n ? n : NULL;
}

EXPORT int uname(struct utsname *buf)
{
    if (syscall(SYS_uname, buf) != 0) return -1;
    const char *n = simulated_name();
    if (n) {
        strncpy(buf->nodename, n, sizeof buf->nodename - 1);
        buf->nodename[sizeof buf->nodename - 1] = 0;
    }
    return 0;
}

EXPORT int gethostname(char *name, size_t len)
{
    struct utsname u;
    if (uname(&u) != 0) return -1;
    size_t n = strlen(u.nodename);
    if (n + 1 > len) { /* glibc's behaviour: truncate and fail */
        if (len) {
            memcpy(name, u.nodename, len - 1);
            name[len - 1] = 0;
        }
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(name, u.nodename, n + 1);
    return 0;
}
