/* CRC-32C (see crc32c.h). The state between the pre- and post-inversion is the one both the table and
 * the SSE4.2 instruction work on, so either path may carry on from the other. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY_REFLECTED 0x82F63B78u

/* crc32c_table[0] is the classic byte table; [k][b] is the state after b is followed by k zero bytes, so
 * eight table lookups consume eight bytes at once. */
static uint32_t crc32c_table[8][256];
static bool crc32c_is_hardware;
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void)
{
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;
		for (int bit = 0; bit < 8; bit++)
			c = (c & 1u) ? (c >> 1) ^ CRC32C_POLY_REFLECTED : c >> 1;
		crc32c_table[0][b] = c;
	}
	for (uint32_t b = 0; b < 256; b++)
		for (int k = 1; k < 8; k++)
			crc32c_table[k][b] =
				(crc32c_table[k - 1][b] >> 8) ^ crc32c_table[0][crc32c_table[k - 1][b] & 0xffu];
#if defined(__x86_64__)
	__builtin_cpu_init();
	crc32c_is_hardware = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc32c_table_update(uint32_t c, const uint8_t *p, size_t len)
{
	while (len >= 8) {
		uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
		uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
		c = crc32c_table[7][lo & 0xffu] ^ crc32c_table[6][(lo >> 8) & 0xffu] ^
		    crc32c_table[5][(lo >> 16) & 0xffu] ^ crc32c_table[4][lo >> 24] ^
		    crc32c_table[3][hi & 0xffu] ^ crc32c_table[2][(hi >> 8) & 0xffu] ^
		    crc32c_table[1][(hi >> 16) & 0xffu] ^ crc32c_table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len-- > 0)
		c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xffu];
	return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hardware_update(uint32_t c, const uint8_t *p, size_t len)
{
	uint64_t c64 = c;
	while (len >= 8) {
		uint64_t word;
		memcpy(&word, p, sizeof(word)); /* x86 is little-endian, as the instruction expects */
		c64 = __builtin_ia32_crc32di(c64, word);
		p += 8;
		len -= 8;
	}
	uint32_t c32 = (uint32_t)c64;
	while (len-- > 0)
		c32 = __builtin_ia32_crc32qi(c32, *p++);
	return c32;
}
#endif

uint32_t crc32c_extend(uint32_t crc, const void *data, size_t len)
{
	TERN_ASSERT(data != NULL || len == 0);
	pthread_once(&crc32c_once, crc32c_init);
	if (len == 0)
		return crc;
#if defined(__x86_64__)
	if (crc32c_is_hardware)
		return ~crc32c_hardware_update(~crc, data, len);
#endif
	return ~crc32c_table_update(~crc, data, len);
}

uint32_t crc32c_extend_portable(uint32_t crc, const void *data, size_t len)
{
	TERN_ASSERT(data != NULL || len == 0);
	pthread_once(&crc32c_once, crc32c_init);
	if (len == 0)
		return crc;
	return ~crc32c_table_update(~crc, data, len);
}

uint32_t crc32c(const void *data, size_t len)
{
	return crc32c_extend(0, data, len);
}
