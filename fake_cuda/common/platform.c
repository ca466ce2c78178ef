#include "platform.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* GPU bus numbers of an 8-GPU HGX/DGX H100 board, GPU0..7. */
static const unsigned default_gpu_bus[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
/* Bare-metal NVSwitch bus ids and how an H100's 18 links spread over them. */
static const unsigned default_nvswitch_bus[4] = {0x05, 0x06, 0x07, 0x08};

void fc_pci_format(const fc_pci_addr *a, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%02x:%02x.%x", a->domain, a->bus, a->device, a->function);
}

int fc_pci_parse(const char *s, fc_pci_addr *out)
{
    unsigned d, b, dev, f;
    char tail;
    /* NVML's 8-digit domain form is accepted too; only the low 16 bits count. */
    if (sscanf(s, "%x:%x:%x.%x%c", &d, &b, &dev, &f, &tail) != 4) return -1;
    if (d > 0xffffffffu || b > 0xff || dev > 0x1f || f > 7) return -1;
    out->domain = d & 0xffff;
    out->bus = b;
    out->device = dev;
    out->function = f;
    return 0;
}

void fc_uuid_format(const unsigned char u[16], char *buf, size_t len)
{
    snprintf(buf, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

static int uuid_parse(const char *s, unsigned char out[16])
{
    if (strncmp(s, "GPU-", 4) == 0) s += 4;
    int n = 0;
    for (; *s && n < 32; s++) {
        if (*s == '-') continue;
        if (!isxdigit((unsigned char)*s)) return -1;
        int v = isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10);
        if (n % 2 == 0) out[n / 2] = (unsigned char)(v << 4);
        else out[n / 2] |= (unsigned char)v;
        n++;
    }
    return (n == 32 && *s == 0) ? 0 : -1;
}

/* The rule ncclsim's Python side uses too: "ncsm", host (BE32), device (BE32), 0..01. */
static void default_uuid(int host, int dev, unsigned char u[16])
{
    static const unsigned char tag[4] = {'n', 'c', 's', 'm'};
    memcpy(u, tag, 4);
    for (int i = 0; i < 4; i++) {
        u[4 + i] = (unsigned char)((unsigned)host >> (24 - 8 * i));
        u[8 + i] = (unsigned char)((unsigned)dev >> (24 - 8 * i));
    }
    memset(u + 12, 0, 4);
    u[15] = 1;
}

static int pci_exists_in_sys(const fc_pci_addr *a)
{
    char path[64], id[16];
    fc_pci_format(a, id, sizeof id);
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s", id);
    return access(path, F_OK) == 0;
}

/* Bus-id domain of a simulated host: its index, moved to 0x100 + index when
 * one of its GPU or NVSwitch bus ids names a PCI device that really exists
 * here (NCCL would read /sys). Same rule as ncclsim/platform/config.py. */
static unsigned host_domain(int host_index, const unsigned *buses, int n)
{
    unsigned domain = (unsigned)host_index & 0xffff;
    for (int i = 0; i < n + 4; i++) {
        fc_pci_addr a = {domain, i < n ? buses[i] : default_nvswitch_bus[i - n], 0, 0};
        if (pci_exists_in_sys(&a)) return (0x100u + (unsigned)host_index) & 0xffff;
    }
    return domain;
}

/* Spread a model's links over the host's NVSwitches, as NVML reports them. */
static void default_nvlinks(fc_gpu *g, unsigned domain)
{
    g->nvlinks = g->model->nvlinks > FC_MAX_NVLINKS ? FC_MAX_NVLINKS : g->model->nvlinks;
    for (int l = 0; l < g->nvlinks; l++) {
        fc_pci_addr sw = {domain, default_nvswitch_bus[l % 4], 0, 0};
        g->nvlink_remote[l] = sw;
    }
}

void fc_platform_default(fc_platform *p, int host_index)
{
    memset(p, 0, sizeof *p);
    p->host_index = host_index;
    p->driver_version = 13000;
    snprintf(p->source, sizeof p->source, "built-in default");
    p->ngpus = 8;
    unsigned domain = host_domain(host_index, default_gpu_bus, 8);
    for (int i = 0; i < 8; i++) {
        fc_gpu *g = &p->gpu[i];
        g->model = fc_gpu_model_find("h100");
        g->pci = (fc_pci_addr){domain, default_gpu_bus[i], 0, 0};
        default_uuid(host_index, i, g->uuid);
        g->memory = g->model->total_memory;
        g->numa_node = i < 4 ? 0 : 1;
        g->pcie_gen = g->model->pcie_gen;
        g->pcie_width = g->model->pcie_width;
        default_nvlinks(g, domain);
    }
    p->multicast = 1; /* an HGX H100 board: NVSwitch gen 3 with multicast */
}

const fc_gpu_model *fc_gpu_model_find(const char *key_or_name)
{
    for (int i = 0; i < fc_gpu_model_count; i++)
        if (strcmp(fc_gpu_models[i].key, key_or_name) == 0 ||
            strcmp(fc_gpu_models[i].name, key_or_name) == 0)
            return &fc_gpu_models[i];
    return NULL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static int parse_int(const char *v, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || *v == 0 || *end != 0 || x < min || x > max) return -1;
    *out = x;
    return 0;
}

static int parse_nvlinks(char *v, fc_gpu *g)
{
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(v, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tok = trim(tok);
        long long count = 1;
        char *star = strchr(tok, '*');
        if (star) {
            *star = 0;
            if (parse_int(trim(star + 1), 1, FC_MAX_NVLINKS, &count)) return -1;
        }
        fc_pci_addr a;
        if (fc_pci_parse(trim(tok), &a)) return -1;
        for (long long i = 0; i < count; i++) {
            if (n >= FC_MAX_NVLINKS) return -1;
            g->nvlink_remote[n++] = a;
        }
    }
    g->nvlinks = n;
    return 0;
}

#define FAIL(...)                                                                       \
    do {                                                                                \
        int o_ = snprintf(err, errlen, "%s:%d: ", path, lineno);                        \
        if (o_ >= 0 && (size_t)o_ < errlen) snprintf(err + o_, errlen - (size_t)o_, __VA_ARGS__); \
        goto fail;                                                                      \
    } while (0)

int fc_platform_load(const char *path, fc_platform *p, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    int lineno = 0;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open platform configuration: %s", path, strerror(errno));
        return -1;
    }
    memset(p, 0, sizeof *p);
    p->driver_version = 13000;
    snprintf(p->source, sizeof p->source, "%s", path);
    enum { NONE, PLATFORM, GPU, NIC } section = NONE;
    int guid_given[FC_MAX_NICS] = {0};
    int links_given[FC_MAX_GPUS] = {0}, uuid_given[FC_MAX_GPUS] = {0};
    int bus_given[FC_MAX_GPUS] = {0};
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) FAIL("line too long");
        char *s = trim(line);
        if (*s == 0 || *s == '#') continue;
        if (*s == '[') {
            if (strcmp(s, "[platform]") == 0) section = PLATFORM;
            else if (strcmp(s, "[gpu]") == 0) {
                if (p->ngpus >= FC_MAX_GPUS) FAIL("more than %d [gpu] sections", FC_MAX_GPUS);
                section = GPU;
                fc_gpu *g = &p->gpu[p->ngpus++];
                g->numa_node = -1;
            } else if (strcmp(s, "[nic]") == 0) {
                if (p->nnics >= FC_MAX_NICS) FAIL("more than %d [nic] sections", FC_MAX_NICS);
                section = NIC;
                fc_nic *n = &p->nic[p->nnics++];
                n->port = 1;
            } else FAIL("unknown section %s (expected [platform], [gpu] or [nic])", s);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) FAIL("expected `key = value`, got \"%s\"", s);
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        long long x;
        if (section == PLATFORM) {
            if (strcmp(key, "host_index") == 0) {
                if (parse_int(val, 0, 0xffff, &x)) FAIL("host_index must be 0..65535, got \"%s\"", val);
                p->host_index = (int)x;
            } else if (strcmp(key, "driver_version") == 0) {
                if (parse_int(val, 11000, 99990, &x)) FAIL("driver_version must look like 13000, got \"%s\"", val);
                p->driver_version = (int)x;
            } else if (strcmp(key, "hostname") == 0) {
                snprintf(p->hostname, sizeof p->hostname, "%s", val);
            } else if (strcmp(key, "multicast") == 0) {
                if (parse_int(val, 0, 1, &x)) FAIL("multicast must be 0 or 1, got \"%s\"", val);
                p->multicast = (int)x;
            } else if (strcmp(key, "collnet") == 0) {
                if (parse_int(val, 0, 1, &x)) FAIL("collnet must be 0 or 1, got \"%s\"", val);
                p->collnet = (int)x;
            } else FAIL("unknown key \"%s\" in [platform]", key);
        } else if (section == GPU) {
            int i = p->ngpus - 1;
            fc_gpu *g = &p->gpu[i];
            if (strcmp(key, "model") == 0) {
                if (!(g->model = fc_gpu_model_find(val))) FAIL("unknown GPU model \"%s\"", val);
            } else if (strcmp(key, "bus_id") == 0) {
                if (fc_pci_parse(val, &g->pci)) FAIL("bus_id must look like 0000:18:00.0, got \"%s\"", val);
                bus_given[i] = 1;
            } else if (strcmp(key, "uuid") == 0) {
                if (uuid_parse(val, g->uuid)) FAIL("uuid must be 32 hex digits (GPU-xxxxxxxx-...), got \"%s\"", val);
                uuid_given[i] = 1;
            } else if (strcmp(key, "memory") == 0) {
                if (parse_int(val, 1 << 20, (long long)1 << 50, &x)) FAIL("memory must be a byte count, got \"%s\"", val);
                g->memory = (uint64_t)x;
            } else if (strcmp(key, "numa_node") == 0) {
                if (parse_int(val, -1, 1023, &x)) FAIL("numa_node must be -1..1023, got \"%s\"", val);
                g->numa_node = (int)x;
            } else if (strcmp(key, "pcie_gen") == 0) {
                if (parse_int(val, 1, 6, &x)) FAIL("pcie_gen must be 1..6, got \"%s\"", val);
                g->pcie_gen = (int)x;
            } else if (strcmp(key, "pcie_width") == 0) {
                if (parse_int(val, 1, 32, &x)) FAIL("pcie_width must be 1..32, got \"%s\"", val);
                g->pcie_width = (int)x;
            } else if (strcmp(key, "nvlink_remote") == 0) {
                if (parse_nvlinks(val, g)) FAIL("nvlink_remote must be a list of bus ids with optional *count, at most %d links", FC_MAX_NVLINKS);
                links_given[i] = 1;
            } else FAIL("unknown key \"%s\" in [gpu]", key);
        } else if (section == NIC) {
            int i = p->nnics - 1;
            fc_nic *n = &p->nic[i];
            if (strcmp(key, "name") == 0) {
                if (!*val || strlen(val) >= sizeof n->name) FAIL("nic name must be 1..%zu characters", sizeof n->name - 1);
                snprintf(n->name, sizeof n->name, "%s", val);
            } else if (strcmp(key, "bus_id") == 0) {
                if (fc_pci_parse(val, &n->pci)) FAIL("bus_id must look like 0000:19:00.0, got \"%s\"", val);
            } else if (strcmp(key, "speed") == 0) {
                if (parse_int(val, 1, 100000000, &x)) FAIL("speed must be Mb/s (e.g. 400000), got \"%s\"", val);
                n->speed_mbps = (int)x;
            } else if (strcmp(key, "guid") == 0) {
                char *end;
                errno = 0;
                n->guid = strtoull(val, &end, 0);
                if (errno || !*val || *end) FAIL("guid must be a number (e.g. 0x1d0001a000000000), got \"%s\"", val);
                guid_given[i] = 1;
            } else if (strcmp(key, "port") == 0) {
                if (parse_int(val, 1, 255, &x)) FAIL("port must be 1..255, got \"%s\"", val);
                n->port = (int)x;
            } else if (strcmp(key, "latency") == 0) {
                char *end;
                n->latency_us = strtof(val, &end);
                if (!*val || *end || n->latency_us < 0) FAIL("latency must be microseconds >= 0, got \"%s\"", val);
            } else FAIL("unknown key \"%s\" in [nic]", key);
        } else FAIL("\"%s\" outside any section", key);
    }
    lineno = 0;
    if (p->ngpus == 0) FAIL("no [gpu] section: a host needs at least one GPU");
    for (int i = 0; i < p->ngpus; i++) {
        fc_gpu *g = &p->gpu[i];
        if (!g->model) FAIL("[gpu] #%d has no model", i);
        if (!bus_given[i]) FAIL("[gpu] #%d has no bus_id", i);
        for (int j = 0; j < i; j++)
            if (memcmp(&p->gpu[j].pci, &g->pci, sizeof g->pci) == 0)
                FAIL("[gpu] #%d and #%d have the same bus_id", j, i);
        if (!g->memory) g->memory = g->model->total_memory;
        if (!g->pcie_gen) g->pcie_gen = g->model->pcie_gen;
        if (!g->pcie_width) g->pcie_width = g->model->pcie_width;
        if (!uuid_given[i]) default_uuid(p->host_index, i, g->uuid);
        if (!links_given[i]) default_nvlinks(g, g->pci.domain);
    }
    for (int i = 0; i < p->nnics; i++) {
        fc_nic *n = &p->nic[i];
        if (!n->name[0]) FAIL("[nic] #%d has no name", i);
        if (!n->speed_mbps) FAIL("[nic] #%d has no speed", i);
        for (int j = 0; j < i; j++)
            if (strcmp(p->nic[j].name, n->name) == 0) FAIL("[nic] #%d and #%d have the same name", j, i);
        /* Unique per (host, NIC): NCCL tells NICs apart by GUID. */
        if (!guid_given[i]) n->guid = 0x6e63736d00000000ull | ((uint64_t)p->host_index << 16) | (uint64_t)i;
    }
    fclose(f);
    return 0;
fail:
    fclose(f);
    return -1;
}

static fc_platform the_platform;
static const fc_platform *loaded;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load_once(void)
{
    const char *path = getenv("NCCLSIM_PLATFORM");
    if (path && *path) {
        char err[1200];
        if (fc_platform_load(path, &the_platform, err, sizeof err)) {
            fc_log_fatal_config("%s", err);
            return;
        }
    } else {
        const char *hostid = getenv("NCCL_HOSTID");
        int host = 0;
        if (hostid && *hostid) {
            /* "ncclsim-h3" or "3": the trailing number is the host index. */
            const char *d = hostid + strlen(hostid);
            while (d > hostid && isdigit((unsigned char)d[-1])) d--;
            host = *d ? atoi(d) & 0xffff : 0;
        }
        fc_platform_default(&the_platform, host);
        /* NCCL_HOSTID as given: host names are ncclsim's Python side's to choose. */
        snprintf(the_platform.hostname, sizeof the_platform.hostname, "%s", hostid ? hostid : "");
    }
    loaded = &the_platform;
    FC_LOG(FC_LOG_INFO, "platform: %d GPU(s) on host %d from %s", loaded->ngpus,
           loaded->host_index, loaded->source);
}

const fc_platform *fc_platform_get(void)
{
    pthread_once(&once, load_once);
    return loaded;
}
