/*
 * crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every frame of the
 * recovery journal's segments (journal_segment.h). Written here because no library tern links offers it.
 * The SSE4.2 crc32 instruction is used when the CPU has it (checked once, at the first call); otherwise
 * a slicing-by-8 table. Both give the same values: crc32c("123456789") = 0xE3069283.
 *
 * Threads: any; the tables are built once under pthread_once. Never: allocates, or keeps its input.
 */
#ifndef TERN_REPLAY_CRC32C_H
#define TERN_REPLAY_CRC32C_H

#include "base.h"

/* The CRC-32C of `len` bytes. */
uint32_t crc32c(const void *data, size_t len);

/* The CRC-32C of (the bytes `crc` was computed over, then `data`): crc32c_extend(crc32c(a), b) = crc32c(ab),
 * and crc32c_extend(0, p, n) = crc32c(p, n). */
uint32_t crc32c_extend(uint32_t crc, const void *data, size_t len);

/* crc32c_extend by the table alone, whatever the CPU; for tests that compare the two paths. */
uint32_t crc32c_extend_portable(uint32_t crc, const void *data, size_t len);

#endif
