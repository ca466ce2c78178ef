/* The CUDA runtime's integrity check (export table INTEGRITY_CHECK): the
 * runtime calls the driver with its version and the time, and compares the
 * 16 bytes answered with what it computes itself. For most runtime versions
 * the answer is HMAC-MD2 (MD2 of RFC 1319; HMAC with a 16-byte key, MD2's
 * block size) under a fixed key that the driver recovers from a scrambled
 * table, over a message of what both sides know: driver and runtime
 * versions, process id, thread id, the addresses of the driver's
 * CUDART_INTERFACE and INTEGRITY_CHECK tables and of the check function, the
 * time, then per device its UUID and PCI domain, bus and device. Runtime
 * versions ending in 0 or 1 expect a constant instead.
 *
 * ncclsim answers this check only to interoperate with NVIDIA's unmodified
 * runtime on machines without NVIDIA hardware.
 *
 * Pure functions with no driver state, so tests can compile this file alone. */
#ifndef NCCLSIM_DRIVER_INTEGRITY_H
#define NCCLSIM_DRIVER_INTEGRITY_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the fixed part of the message, and of each device's record. */
#define FC_INTEGRITY_HEADER_BYTES 48
#define FC_INTEGRITY_DEVICE_BYTES 28

/* MD2 (RFC 1319). */
void fc_md2(const uint8_t *msg, size_t len, uint8_t out[16]);

/* HMAC-MD2 with a 16-byte key (MD2's block size). */
void fc_hmac_md2(const uint8_t key[16], const uint8_t *msg, size_t len, uint8_t out[16]);

/* The HMAC key, derived from the runtime's table. */
void fc_integrity_key(uint8_t key[16]);

/* Pack the message (little-endian, no padding) into buf. Returns its length,
 * FC_INTEGRITY_HEADER_BYTES + ndev * FC_INTEGRITY_DEVICE_BYTES; writes nothing
 * when that exceeds cap (call with cap 0 to size the buffer). */
size_t fc_integrity_message(uint8_t *buf, size_t cap, uint32_t driver_version,
                            uint32_t runtime_version, uint32_t pid, uint32_t tid,
                            uintptr_t cudart_table, uintptr_t integrity_table,
                            uintptr_t check_fn, uint64_t unix_time, int ndev,
                            const uint8_t (*uuids)[16], const uint32_t *domain,
                            const uint32_t *bus, const uint32_t *device);

/* The 16 bytes the check answers for runtime_version over msg: a constant for
 * versions ending in 0 or 1, HMAC-MD2 otherwise. */
void fc_integrity_digest(uint32_t runtime_version, const uint8_t *msg, size_t len,
                         uint8_t out[16]);

#endif
