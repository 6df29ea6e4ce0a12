/*
 * The runtime's check of the driver (export table d4082055-bde6-704b-8d34-
 * ba123c66e1f2, slot 1): given its own version and the time, the driver
 * answers a 16-byte value the runtime compares with what it expects, and the
 * runtime refuses to work when they differ. The value is public knowledge
 * (the ZLUDA project documents it): for runtime versions whose last digit is 0
 * or 1 a constant; otherwise an HMAC over MD2 (RFC 1319, RFC 2104; block and
 * key 16 bytes) keyed with a fixed key, of the driver version, the runtime
 * version, the process and thread ids, the addresses of the runtime interface
 * table, of this table and of the slot's function, the time, then for every
 * visible device its UUID and PCI domain, bus and device numbers.
 */
#include "integrity.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* RFC 1319's substitution table, built from the digits of pi. */
static const uint8_t md2_s[256] = {
	 41,  46,  67, 201, 162, 216, 124,   1,  61,  54,  84, 161, 236, 240,   6,  19,
	 98, 167,   5, 243, 192, 199, 115, 140, 152, 147,  43, 217, 188,  76, 130, 202,
	 30, 155,  87,  60, 253, 212, 224,  22, 103,  66, 111,  24, 138,  23, 229,  18,
	190,  78, 196, 214, 218, 158, 222,  73, 160, 251, 245, 142, 187,  47, 238, 122,
	169, 104, 121, 145,  21, 178,   7,  63, 148, 194,  16, 137,  11,  34,  95,  33,
	128, 127,  93, 154,  90, 144,  50,  39,  53,  62, 204, 231, 191, 247, 151,   3,
	255,  25,  48, 179,  72, 165, 181, 209, 215,  94, 146,  42, 172,  86, 170, 198,
	 79, 184,  56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116,   4, 241,
	 69, 157, 112,  89, 100, 113, 135,  32, 134,  91, 207, 101, 230,  45, 168,   2,
	 27,  96,  37, 173, 174, 176, 185, 246,  28,  70,  97, 105,  52,  64, 126,  15,
	 85,  71, 163,  35, 221,  81, 175,  58, 195,  92, 249, 206, 186, 197, 234,  38,
	 44,  83,  13, 110, 133,  40, 132,   9, 211, 223, 205, 244,  65, 129,  77,  82,
	106, 220,  55, 200, 108, 193, 171, 250,  36, 225, 123,   8,  12, 189, 177,  74,
	120, 136, 149, 139, 227,  99, 232, 109, 233, 203, 213, 254,  59,   0,  29,  57,
	242, 239, 183,  14, 102,  88, 208, 228, 166, 119, 114, 248, 235, 117,  75,  10,
	 49,  68,  80, 180, 143, 237,  31,  26, 219, 153, 141,  51, 159,  17, 131,  20,
};

struct md2 {
	uint8_t x[48]; /* state, block, state ^ block */
	uint8_t c[16]; /* checksum */
	uint8_t buf[16];
	unsigned n; /* bytes in buf */
};

static void md2_init(struct md2 *m)
{
	memset(m, 0, sizeof(*m));
}

static void md2_block(struct md2 *m, const uint8_t blk[16])
{
	uint8_t l = m->c[15];
	for (int j = 0; j < 16; j++) {
		m->x[16 + j] = blk[j];
		m->x[32 + j] = m->x[j] ^ blk[j];
		l = m->c[j] ^= md2_s[blk[j] ^ l];
	}
	uint8_t t = 0;
	for (int r = 0; r < 18; r++) {
		for (int k = 0; k < 48; k++)
			t = m->x[k] ^= md2_s[t];
		t = (uint8_t)(t + r);
	}
}

static void md2_update(struct md2 *m, const void *p, size_t len)
{
	const uint8_t *b = p;
	while (len--) {
		m->buf[m->n++] = *b++;
		if (m->n == 16) {
			md2_block(m, m->buf);
			m->n = 0;
		}
	}
}

static void md2_final(struct md2 *m, uint8_t out[16])
{
	uint8_t pad = (uint8_t)(16 - m->n);
	uint8_t padding[16];
	memset(padding, pad, sizeof(padding));
	md2_update(m, padding, pad);
	uint8_t c[16];
	memcpy(c, m->c, 16);
	md2_update(m, c, 16);
	memcpy(out, m->x, 16);
}

static const uint8_t hmac_key[16] = { 0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
				      0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f };

struct check_message {
	uint32_t driver_version;
	uint32_t runtime_version;
	uint32_t pid;
	uint32_t tid;
	const void *runtime_table;
	const void *check_table;
	const void *check_fn;
	uint64_t seconds;
};

struct check_device {
	uint8_t uuid[16];
	int32_t pci_domain, pci_bus, pci_device;
};

void fc_integrity_value(const struct fc_integrity_input *in, uint64_t out[2])
{
	switch (in->runtime_version % 10) {
	case 0:
		out[0] = 0x3341181c03cb675cULL;
		out[1] = 0x8ed383aa1f4cd1e8ULL;
		return;
	case 1:
		out[0] = 0x1841181c03cb675cULL;
		out[1] = 0x8ed383aa1f4cd1e8ULL;
		return;
	}
	uint8_t pad[16], inner[16], digest[16];
	struct md2 m;
	md2_init(&m);
	for (int i = 0; i < 16; i++)
		pad[i] = hmac_key[i] ^ 0x36;
	md2_update(&m, pad, 16);
	struct check_message msg;
	memset(&msg, 0, sizeof(msg));
	msg.driver_version = in->driver_version;
	msg.runtime_version = in->runtime_version;
	msg.pid = (uint32_t)getpid();
	msg.tid = (uint32_t)(uintptr_t)pthread_self();
	msg.runtime_table = in->runtime_table;
	msg.check_table = in->check_table;
	msg.check_fn = in->check_fn;
	msg.seconds = in->seconds;
	md2_update(&m, &msg, sizeof(msg));
	for (unsigned d = 0; d < in->ndev; d++) {
		struct check_device dev;
		memset(&dev, 0, sizeof(dev));
		memcpy(dev.uuid, in->dev[d].uuid, 16);
		dev.pci_domain = in->dev[d].pci_domain;
		dev.pci_bus = in->dev[d].pci_bus;
		dev.pci_device = in->dev[d].pci_device;
		md2_update(&m, &dev, sizeof(dev));
	}
	md2_final(&m, inner);
	md2_init(&m);
	for (int i = 0; i < 16; i++)
		pad[i] = hmac_key[i] ^ 0x5c;
	md2_update(&m, pad, 16);
	md2_update(&m, inner, 16);
	md2_final(&m, digest);
	memcpy(&out[0], digest, 8);
	memcpy(&out[1], digest + 8, 8);
}
