/* The modelled run's timeline (timeline.h). Lines are written whole with one
 * write() on an O_APPEND descriptor, so the streams' threads need no lock. */
#include "timeline.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "names.h"
#include "reduce.h"

static struct {
    pthread_mutex_t lock;
    int opened;   /* the file is decided (open, or none); a forked child decides anew */
    int fd;       /* -1: none (not asked for, or cannot be created) */
    bool steps;
    long nsteps;  /* steps written so far */
} tl = {PTHREAD_MUTEX_INITIALIZER, 0, -1, false, 0};

/* The path with %p replaced by the pid, as NCCL_DEBUG_FILE does. */
static void expand(const char *pattern, char *out, size_t n)
{
    size_t len = 0;
    for (const char *c = pattern; *c && len + 1 < n; c++) {
        if (c[0] == '%' && c[1] == 'p') {
            int w = snprintf(out + len, n - len, "%d", (int)getpid());
            len += w > 0 ? (size_t)w : 0;
            c++;
        } else {
            out[len++] = *c;
        }
    }
    out[len < n ? len : n - 1] = 0;
}

/* A forked child writes a file of its own (its pid names it): the parent's
 * descriptor goes, and the lock is new (another thread may have held it). */
static void in_child(void)
{
    if (tl.fd >= 0) close(tl.fd);
    tl.fd = -1;
    tl.nsteps = 0;
    pthread_mutex_init(&tl.lock, NULL);
    __atomic_store_n(&tl.opened, 0, __ATOMIC_RELEASE);
}

/* Opened once, on the first event: a flag read per step, no system call. */
static int timeline_fd(void)
{
    if (__atomic_load_n(&tl.opened, __ATOMIC_ACQUIRE)) return tl.fd;
    pthread_mutex_lock(&tl.lock);
    if (!tl.opened) {
        static bool fork_handled;
        if (!fork_handled) fork_handled = pthread_atfork(NULL, NULL, in_child) == 0;
        const char *pattern = getenv("NCCLSIM_TIMELINE");
        const char *steps = getenv("NCCLSIM_TIMELINE_STEPS");
        tl.steps = steps && !strcmp(steps, "1");
        if (pattern && *pattern) {
            char path[4096];
            expand(pattern, path, sizeof path);
            tl.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (tl.fd < 0) fc_log_fatal_config("NCCLSIM_TIMELINE: cannot create %s: no timeline", path);
        }
        __atomic_store_n(&tl.opened, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&tl.lock);
    return tl.fd;
}

static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...)
{
    int fd = timeline_fd();
    if (fd < 0) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof line - 1) return; /* a cut line would not parse: leave it out */
    line[n++] = '\n';
    if (write(fd, line, (size_t)n) != n) FC_LOG(FC_LOG_ERROR, "NCCLSIM_TIMELINE: a line was not written");
}

static double us(uint64_t ns) { return (double)ns / 1000.0; }

/* What the kernel ran: the first batch's function, and its collective's size
 * (a point-to-point kernel: the bytes it sends); `works` counts the
 * collectives (each channel has its own copy of a work item: one collective
 * is one pair of buffers). */
void fc_timeline_kernel(const fc_nccl_launch *l, uint64_t start, uint64_t end)
{
    const fc_nccl_batch *b = l->nbatches ? &l->batches[0] : NULL;
    const fc_nccl_func *f = b ? b->func : NULL;
    if (!f) return;
    long long count = 0;
    int typeSize = 1, works = 0;
    const fc_nccl_work *first = NULL;
    for (int i = 0; i < l->nworks; i++) {
        const fc_nccl_work *w = &l->works[i];
        if (w->type == FC_NCCL_WORK_P2P) {
            bool seen = false; /* a transfer's copies on its other channels */
            for (int j = 0; j < i && !seen; j++)
                seen = l->works[j].type == FC_NCCL_WORK_P2P && l->works[j].p2p.sendRank == w->p2p.sendRank &&
                       l->works[j].p2p.sendAddr == w->p2p.sendAddr;
            if (!seen && w->p2p.sendRank >= 0) count += (long long)w->p2p.sendBytes;
            works = 1;
        } else if (w->type == FC_NCCL_WORK_COLL || w->type == FC_NCCL_WORK_COLLREG) {
            if (!first) {
                first = w;
                works = 1;
                count = fc_nccl_coll_count(l, w, f->algo);
                typeSize = (int)fc_nccl_type_size(f->type);
            } else if (w->coll.sendbuff != first->coll.sendbuff || w->coll.recvbuff != first->coll.recvbuff) {
                works++;
            }
        }
    }
    bool p2p = f->coll == FC_NCCL_COLL_SendRecv;
    const char *coll = fc_nccl_coll_name(f->coll), *algo = p2p ? "" : fc_nccl_algo_name(f->algo),
               *proto = p2p ? "" : fc_nccl_proto_name(f->proto);
    emit("{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"%s%s%s%s%s\",\"ts\":%.3f,\"dur\":%.3f,\"tid\":%llu,"
         "\"args\":{\"coll\":\"%s\",\"algo\":\"%s\",\"proto\":\"%s\",\"type\":\"%s\",\"redop\":\"%s\","
         "\"count\":%lld,\"type_size\":%d,\"rank\":%d,\"nranks\":%d,\"device\":%d,\"stream\":\"%llu\","
         "\"comm\":\"0x%llx\",\"channels\":%d,\"works\":%d}}",
         coll, *algo ? " " : "", algo, *proto ? "/" : "", proto, us(start), us(end > start ? end - start : 0),
         1 + l->stream, coll, algo, proto, p2p ? "u8" : fc_nccl_type_name(f->type),
         p2p ? "" : fc_nccl_redop_name(f->redop), count, typeSize, l->rank, l->nRanks, l->device, l->stream,
         (unsigned long long)l->comm, l->nchannels, works);
}

bool fc_timeline_steps(void) { return timeline_fd() >= 0 && tl.steps; }

static void peers(char *out, size_t n, const char *what, const int *peer, int npeers)
{
    size_t len = strlen(out);
    for (int i = 0; i < npeers && len + 16 < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%s%d", i ? "," : len ? " " : "", i ? "" : what, peer[i]);
}

void fc_timeline_step(const fc_nccl_launch *l, int channel, int proto, const int *from, int nfrom, const int *to,
                      int nto, uint64_t start, uint64_t end, int64_t bytes)
{
    if (!fc_timeline_steps()) return;
    long kept = __atomic_fetch_add(&tl.nsteps, 1, __ATOMIC_RELAXED);
    if (kept == FC_TIMELINE_MAX_STEPS)
        emit("{\"ph\":\"i\",\"cat\":\"note\",\"name\":\"steps truncated\",\"ts\":%.3f,\"tid\":0,\"s\":\"p\","
             "\"args\":{\"kept\":%d}}", us(start), FC_TIMELINE_MAX_STEPS);
    if (kept >= FC_TIMELINE_MAX_STEPS) return;
    char name[200] = "";
    peers(name, sizeof name, "recv ", from, nfrom);
    peers(name, sizeof name, "send ", to, nto);
    emit("{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,\"tid\":%d,"
         "\"args\":{\"bytes\":%lld,\"proto\":\"%s\",\"rank\":%d}}",
         *name ? name : "local", us(start), us(end > start ? end - start : 0), 1000 + channel, (long long)bytes,
         fc_nccl_proto_name(proto), l->rank);
}
