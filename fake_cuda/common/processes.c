/* The per-host directory of processes using the simulated GPUs (processes.h). */
#include "processes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* dirname(NCCLSIM_PLATFORM)/processes, or -1 without a platform file. */
static int directory(char *out, size_t len)
{
    const char *platform = getenv("NCCLSIM_PLATFORM");
    const char *slash = platform ? strrchr(platform, '/') : NULL;
    if (!platform || !*platform) return -1;
    int n = slash ? snprintf(out, len, "%.*s/processes", (int)(slash - platform), platform)
                  : snprintf(out, len, "processes");
    return n > 0 && (size_t)n < len ? 0 : -1;
}

static char published[PATH_MAX]; /* the file written, and by whom: a forked */
static pid_t published_by;         /* child must not remove its parent's */
static int published_fd = -1;

/* At exit, or when the library is unloaded first. */
__attribute__((destructor)) static void unpublish(void)
{
    if (published[0] && published_by == getpid()) unlink(published);
}

/* This process's file, opened once (again in a forked child); -1 when it cannot be. */
static int own_file(void)
{
    pid_t pid = getpid();
    if (published_fd >= 0 && published_by == pid) return published_fd;
    if (published_fd >= 0) close(published_fd);  /* the parent's, inherited by a fork */
    published_fd = -1;
    char dir[PATH_MAX - 32];
    if (directory(dir, sizeof dir) || (mkdir(dir, 0777) && errno != EEXIST)) return -1;
    snprintf(published, sizeof published, "%s/%d", dir, (int)pid);
    published_fd = open(published, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    published_by = pid;
    return published_fd;
}

/* One pwrite of fixed-width lines, so the file never shrinks and a reader sees
 * whole lines (at worst a count from just before): cheap enough to follow
 * every allocation (a rename per change cost ranks a third of their time). */
void fc_processes_publish(const fc_platform *p, const int *in_use, const size_t *bytes)
{
    int fd = p ? own_file() : -1;
    if (fd < 0) return;
    char text[FC_MAX_GPUS * 48];
    size_t len = 0;
    for (int d = 0; d < p->ngpus; d++) {
        if (!in_use[d]) continue;
        char bus[32];
        fc_pci_format(&p->gpu[d].pci, bus, sizeof bus);
        len += (size_t)snprintf(text + len, sizeof text - len, "%-16s %20zu\n", bus, bytes[d]);
    }
    if (pwrite(fd, text, len, 0) < 0) return;  /* a monitor's view: nothing to report to the program */
}

static int alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

/* The bytes `file` lists for `bus`; -1 when it lists none. */
static long long bytes_on(FILE *f, const char *bus)
{
    char line[128], id[64];
    unsigned long long bytes;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%63s %llu", id, &bytes) == 2 && strcmp(id, bus) == 0) return (long long)bytes;
    return -1;
}

int fc_processes_on(const fc_gpu *gpu, fc_gpu_process *out, int max)
{
    char dir[PATH_MAX - 32], bus[32];
    if (directory(dir, sizeof dir)) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    fc_pci_format(&gpu->pci, bus, sizeof bus);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;  /* ".", "..", a file being written */
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
        if (!alive((pid_t)pid)) {  /* killed before it could remove its file */
            unlink(path);
            continue;
        }
        FILE *f = fopen(path, "r");
        if (!f) continue;
        long long bytes = bytes_on(f, bus);
        fclose(f);
        if (bytes < 0) continue;
        if (n < max) out[n] = (fc_gpu_process){(pid_t)pid, (uint64_t)bytes};
        n++;
    }
    closedir(d);
    return n;
}
