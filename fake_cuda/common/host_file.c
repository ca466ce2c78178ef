/* Tables every process of a simulated host shares (host_file.h). */
#include "host_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

void *fc_host_file_map(const char *path, size_t bytes)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return NULL;
    /* every process asks for the same size: a later ftruncate changes nothing */
    void *p = ftruncate(fd, (off_t)bytes) == 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                               : MAP_FAILED;
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}
