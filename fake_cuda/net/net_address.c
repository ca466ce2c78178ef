/* The IPv4 address this process's listeners bind to: the interface NCCL's
 * own bootstrap uses, so that a simulation spread over several machines
 * reaches its peers the way NCCL does (one machine: `lo`).
 *
 * NCCL_SOCKET_IFNAME is read with NCCL's syntax: a comma-separated list of
 * name prefixes, `=` in front for exact names, `^` in front to exclude the
 * list. Unset: NCCL's preference, an `ib` interface, then any but `docker`
 * and `lo`, then `lo`. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_core.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct in_addr chosen;
static char chosen_name[IF_NAMESIZE + 1];
static bool found;

/* Whether `name` is in the comma-separated `list` (prefixes, or exact names). */
static bool in_list(const char *name, const char *list, bool exact)
{
    size_t n = strlen(name);
    while (*list) {
        size_t len = strcspn(list, ",");
        if (len && (exact ? len == n && !strncmp(name, list, len) : !strncmp(name, list, len)))
            return true;
        list += len + (list[len] == ',');
    }
    return false;
}

static bool matches(const char *name, const char *spec)
{
    bool exclude = *spec == '^';
    if (exclude) spec++;
    bool exact = *spec == '=';
    if (exact) spec++;
    return in_list(name, spec, exact) != exclude;
}

/* The first up IPv4 interface that `accept` approves, in the system's order. */
static bool pick(struct ifaddrs *all, bool (*accept)(const char *, const char *), const char *arg)
{
    for (struct ifaddrs *i = all; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
        if (!accept(i->ifa_name, arg)) continue;
        chosen = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        snprintf(chosen_name, sizeof chosen_name, "%s", i->ifa_name);
        return true;
    }
    return false;
}

static bool by_prefix(const char *name, const char *prefix)
{
    return !strncmp(name, prefix, strlen(prefix));
}

static bool not_docker_or_lo(const char *name, const char *unused)
{
    (void)unused;
    return strncmp(name, "docker", 6) && strncmp(name, "lo", 2);
}

static void resolve(void)
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) < 0) return;
    const char *spec = getenv("NCCL_SOCKET_IFNAME");
    if (spec && *spec)
        found = pick(all, matches, spec);
    else
        found = pick(all, by_prefix, "ib") || pick(all, not_docker_or_lo, NULL) ||
                pick(all, by_prefix, "lo");
    freeifaddrs(all);
}

bool fcn_listen_address(struct in_addr *addr, const char **ifname)
{
    pthread_once(&once, resolve);
    if (found) {
        *addr = chosen;
        *ifname = chosen_name;
    }
    return found;
}

fcn_addr_text fcn_address_text(struct in_addr a)
{
    fcn_addr_text t;
    if (!inet_ntop(AF_INET, &a, t.s, sizeof t.s)) snprintf(t.s, sizeof t.s, "?");
    return t;
}
