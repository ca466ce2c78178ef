/* Integrity check of the CUDA runtime's export tables (see integrity.h): MD2,
 * HMAC-MD2, the key and the message.
 *
 * The runtime hashes what it knows about the driver and compares with what
 * the driver answers. ncclsim answers it only to interoperate with NVIDIA's
 * unmodified runtime on machines without NVIDIA hardware. */
#include "integrity.h"

#include <string.h>

/* RFC 1319's substitution table (a permutation of 0..255 built from pi's
 * digits), as published in the RFC. */
static const uint8_t md2_s[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,
    98,  167, 5,   243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202,
    30,  155, 87,  60,  253, 212, 224, 22,  103, 66,  111, 24,  138, 23,  229, 18,
    190, 78,  196, 214, 218, 158, 222, 73,  160, 251, 245, 142, 187, 47,  238, 122,
    169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137, 11,  34,  95,  33,
    128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151, 3,
    255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198,
    79,  184, 56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241,
    69,  157, 112, 89,  100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,
    27,  96,  37,  173, 174, 176, 185, 246, 28,  70,  97,  105, 52,  64,  126, 15,
    85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249, 206, 186, 197, 234, 38,
    44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129, 77,  82,
    106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,
    120, 136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,
    242, 239, 183, 14,  102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,
    49,  68,  80,  180, 143, 237, 31,  26,  219, 153, 141, 51,  159, 17,  131, 20,
};

typedef struct {
    uint8_t x[48];        /* state: x[0..15] is the digest */
    uint8_t checksum[16];
    uint8_t last;         /* L of the checksum recurrence */
    uint8_t buf[16];
    size_t buffered;
} md2_ctx;

static void md2_block(md2_ctx *c, const uint8_t block[16], int update_checksum)
{
    for (int j = 0; j < 16; j++) {
        c->x[16 + j] = block[j];
        c->x[32 + j] = (uint8_t)(c->x[16 + j] ^ c->x[j]);
    }
    uint8_t t = 0;
    for (int round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++) t = c->x[k] ^= md2_s[t];
        t = (uint8_t)(t + round);
    }
    if (update_checksum) {
        /* RFC 1319 as corrected by its errata: C[j] is xor-ed, not assigned. */
        for (int j = 0; j < 16; j++) c->last = c->checksum[j] ^= md2_s[block[j] ^ c->last];
    }
}

static void md2_init(md2_ctx *c) { memset(c, 0, sizeof *c); }

static void md2_update(md2_ctx *c, const uint8_t *p, size_t len)
{
    while (len > 0) {
        size_t n = 16 - c->buffered;
        if (n > len) n = len;
        memcpy(c->buf + c->buffered, p, n);
        c->buffered += n;
        p += n;
        len -= n;
        if (c->buffered == 16) {
            md2_block(c, c->buf, 1);
            c->buffered = 0;
        }
    }
}

static void md2_final(md2_ctx *c, uint8_t out[16])
{
    /* Pad with n bytes of value n (1..16), always at least one. */
    uint8_t n = (uint8_t)(16 - c->buffered);
    memset(c->buf + c->buffered, n, n);
    md2_block(c, c->buf, 1);
    uint8_t checksum[16];
    memcpy(checksum, c->checksum, 16);
    md2_block(c, checksum, 0);
    memcpy(out, c->x, 16);
}

void fc_md2(const uint8_t *msg, size_t len, uint8_t out[16])
{
    md2_ctx c;
    md2_init(&c);
    md2_update(&c, msg, len);
    md2_final(&c, out);
}

void fc_hmac_md2(const uint8_t key[16], const uint8_t *msg, size_t len, uint8_t out[16])
{
    uint8_t pad[16], inner[16];
    md2_ctx c;

    for (int i = 0; i < 16; i++) pad[i] = key[i] ^ 0x36;
    md2_init(&c);
    md2_update(&c, pad, 16);
    md2_update(&c, msg, len);
    md2_final(&c, inner);

    for (int i = 0; i < 16; i++) pad[i] = key[i] ^ 0x5c;
    md2_init(&c);
    md2_update(&c, pad, 16);
    md2_update(&c, inner, 16);
    md2_final(&c, out);
}

void fc_integrity_key(uint8_t key[16])
{
    /* The key is not stored as such: it is scattered over this table and
     * recovered by the walk below. From index 13, each step xors three
     * entries into one key byte, places it and picks the next index by a
     * running value, until the walk is back at 13. */
    static const uint8_t t_tab[64] = {
        0x6b, 0xcf, 0x32, 0x0f, 0xa4, 0x49, 0xd3, 0xa8, 0x33, 0xf8, 0xd0, 0x8e, 0x12, 0x4e, 0xa8, 0x00,
        0xeb, 0x94, 0x2c, 0x8f, 0x34, 0x49, 0xde, 0xf6, 0xbf, 0x29, 0x91, 0x20, 0xc7, 0x65, 0xf6, 0xba,
        0x78, 0x5c, 0x66, 0x27, 0xa7, 0xb2, 0x73, 0x92, 0xdb, 0x22, 0x1e, 0x20, 0x14, 0x6f, 0x87, 0xff,
        0xa5, 0xc3, 0x18, 0x01, 0x66, 0x64, 0xa5, 0x0e, 0x70, 0x51, 0x52, 0xa7, 0x80, 0x4b, 0xdf, 0xef,
    };
    memset(key, 0, 16);
    unsigned i = 13, t = 0x8b;
    /* The walk is a cycle through the 16 indices back to 13; the bound only
     * guards against an edited table. */
    for (int steps = 0; steps < 256; steps++) {
        unsigned p1 = t_tab[i + 16] ^ t_tab[i + 32] ^ t_tab[i + 48];
        unsigned p2 = t ^ t_tab[i] ^ t_tab[i + 16];
        t = ~(p1 ^ t) & 0xff;
        key[p2 >> 4] = (uint8_t)p1;
        i = p2 & 0xf;
        if (i == 13) break;
    }
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

size_t fc_integrity_message(uint8_t *buf, size_t cap, uint32_t driver_version,
                            uint32_t runtime_version, uint32_t pid, uint32_t tid,
                            uintptr_t cudart_table, uintptr_t integrity_table,
                            uintptr_t check_fn, uint64_t unix_time, int ndev,
                            const uint8_t (*uuids)[16], const uint32_t *domain,
                            const uint32_t *bus, const uint32_t *device)
{
    if (ndev < 0) ndev = 0;
    size_t len = FC_INTEGRITY_HEADER_BYTES + (size_t)ndev * FC_INTEGRITY_DEVICE_BYTES;
    if (len > cap) return len;

    /* The runtime hashes its in-memory struct of a 64-bit little-endian
     * process: u32 x4, pointer x3, u64, no padding between them. */
    uint8_t *p = buf;
    p = put_le(p, driver_version, 4);
    p = put_le(p, runtime_version, 4);
    p = put_le(p, pid, 4);
    p = put_le(p, tid, 4);
    p = put_le(p, cudart_table, 8);
    p = put_le(p, integrity_table, 8);
    p = put_le(p, check_fn, 8);
    p = put_le(p, unix_time, 8);
    for (int d = 0; d < ndev; d++) {
        memcpy(p, uuids[d], 16);
        p += 16;
        p = put_le(p, domain[d], 4);
        p = put_le(p, bus[d], 4);
        p = put_le(p, device[d], 4);
    }
    return len;
}

void fc_integrity_digest(uint32_t runtime_version, const uint8_t *msg, size_t len,
                         uint8_t out[16])
{
    /* For these versions the runtime expects a fixed answer, not a hash. */
    static const uint8_t fixed[16] = {0x5c, 0x67, 0xcb, 0x03, 0x1c, 0x18, 0x41, 0x33,
                                      0xe8, 0xd1, 0x4c, 0x1f, 0xaa, 0x83, 0xd3, 0x8e};
    switch (runtime_version % 10) {
    case 0:
        memcpy(out, fixed, 16);
        return;
    case 1:
        memcpy(out, fixed, 16);
        out[7] = 0x18;
        return;
    default: {
        uint8_t key[16];
        fc_integrity_key(key);
        fc_hmac_md2(key, msg, len, out);
        return;
    }
    }
}
