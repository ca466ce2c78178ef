/* Messages without payload: their non-zero words only (net_sparse.h). */
#include "net_sparse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool fcn_sparse_room(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 4096;
    while (n < need) n *= 2;
    char *b = realloc(*buf, n);
    if (!b) return false;
    *buf = b;
    *cap = n;
    return true;
}

static bool zero_word(const char *p, size_t n)
{
    uint64_t w = 0;
    memcpy(&w, p, n); /* n <= 8: the last word may be short */
    return w == 0;
}

size_t fcn_sparse_pack(const char *data, size_t size, char **buf, size_t *cap)
{
    size_t len = 0;
    for (size_t at = 0; at < size;) {
        size_t n = size - at < 8 ? size - at : 8;
        if (zero_word(data + at, n)) {
            at += n;
            continue;
        }
        size_t end = at + n; /* the run: up to the next zero word */
        while (end < size) {
            size_t m = size - end < 8 ? size - end : 8;
            if (zero_word(data + end, m)) break;
            end += m;
        }
        uint64_t head[2] = {at, end - at};
        if (!fcn_sparse_room(buf, cap, len + sizeof head + (end - at))) return (size_t)-1;
        memcpy(*buf + len, head, sizeof head);
        memcpy(*buf + len + sizeof head, data + at, end - at);
        len += sizeof head + (end - at);
        at = end;
    }
    return len;
}

bool fcn_sparse_unpack(const char *runs, size_t len, char *data, size_t size)
{
    for (size_t at = 0; at < len;) {
        uint64_t head[2];
        if (len - at < sizeof head) return false;
        memcpy(head, runs + at, sizeof head);
        at += sizeof head;
        if (head[1] > len - at || head[0] > size || head[1] > size - head[0]) return false;
        memcpy(data + head[0], runs + at, head[1]);
        at += head[1];
    }
    return true;
}
