/*
 * Module images: what fakecuda reads from the code a module is loaded from,
 * so that cuModuleGetGlobal finds a module's global variables (NVIDIA's
 * runtime and libraries look theirs up when they load their fat binaries).
 * No code runs; a global is host memory (device memory here is host memory
 * too) of the size the image declares, holding the image's initial bytes.
 * Globals are part of the module, not allocations: they are not charged.
 *
 * Recognised images: an ELF cubin, or a fat binary (header magic 0xba55ed50)
 * whose entries are ELF cubins for some compute capability, possibly LZ4
 * compressed; the entry for compute capability 8.0 (fakecuda's devices) is
 * read, else the newest one below it, else the first. A PTX-only image has no
 * globals here (cuModuleGetGlobal answers CUDA_ERROR_NOT_FOUND).
 * Fat binary layout facts: header {u32 magic, u16 version, u16 header size,
 * u64 size of the entries}; entry header {u16 kind (2: ELF), u16 version,
 * u32 header size, u32 padded payload size, u32 compressed size, u32 payload
 * size, u32, u32, u32 compute capability (major*10+minor), u32, u32, u64
 * flags (0x2000: LZ4), u64, u64 uncompressed size}.
 */
#include "modimage.h"

#include <elf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FATBIN_MAGIC 0xba55ed50u
#define FATBIN_KIND_ELF 2
#define FATBIN_FLAG_LZ4 0x2000u
#define FC_DEVICE_SM 80
#define MAX_IMAGE (256u << 20)

struct fatbin_header {
	uint32_t magic;
	uint16_t version;
	uint16_t header_size;
	uint64_t entries_size;
};

struct fatbin_entry {
	uint16_t kind;
	uint16_t version;
	uint32_t header_size;
	uint32_t padded_size;
	uint32_t compressed_size;
	uint32_t payload_size;
	uint32_t unknown1, unknown2;
	uint32_t sm;
	uint32_t unknown3, unknown4;
	uint64_t flags;
	uint64_t unknown5;
	uint64_t uncompressed_size;
};

struct global {
	struct global *next;
	char *name;
	void *mem;
	size_t size;
};

struct fc_modimage {
	unsigned char *elf; /* a private copy of the cubin */
	size_t len;
	pthread_mutex_t lock;
	struct global *globals;
};

/* LZ4 block format: sequences of literals and back-references. 0 on success
 * with *outlen the bytes written, -1 on a malformed or oversized block. */
static int lz4_block(const unsigned char *in, size_t inlen, unsigned char *out, size_t cap, size_t *outlen)
{
	size_t ip = 0, op = 0;
	while (ip < inlen) {
		unsigned token = in[ip++];
		size_t lit = token >> 4;
		if (lit == 15) {
			unsigned char b;
			do {
				if (ip >= inlen)
					return -1;
				b = in[ip++];
				lit += b;
			} while (b == 255);
		}
		if (lit > inlen - ip || lit > cap - op)
			return -1;
		memcpy(out + op, in + ip, lit);
		ip += lit;
		op += lit;
		if (ip == inlen)
			break; /* the last sequence has literals only */
		if (inlen - ip < 2)
			return -1;
		size_t off = in[ip] | (size_t)in[ip + 1] << 8;
		ip += 2;
		size_t mlen = (token & 15) + 4;
		if ((token & 15) == 15) {
			unsigned char b;
			do {
				if (ip >= inlen)
					return -1;
				b = in[ip++];
				mlen += b;
			} while (b == 255);
		}
		if (off == 0 || off > op || mlen > cap - op)
			return -1;
		for (size_t i = 0; i < mlen; i++, op++) /* overlapping copies repeat bytes */
			out[op] = out[op - off];
	}
	*outlen = op;
	return 0;
}

static bool is_elf64(const void *p, size_t len)
{
	const unsigned char *e = p;
	return len >= sizeof(Elf64_Ehdr) && memcmp(e, ELFMAG, SELFMAG) == 0 && e[EI_CLASS] == ELFCLASS64;
}

/* A copy of the cubin of one fat binary entry; NULL when it is not an ELF or unreadable. */
static unsigned char *entry_elf(const struct fatbin_entry *e, size_t *len)
{
	const unsigned char *payload = (const unsigned char *)e + e->header_size;
	if (e->flags & FATBIN_FLAG_LZ4) {
		size_t clen = e->compressed_size ? e->compressed_size : e->payload_size;
		size_t cap = e->uncompressed_size;
		if (clen > e->padded_size || cap == 0 || cap > MAX_IMAGE)
			return NULL;
		unsigned char *out = malloc(cap);
		if (out == NULL || lz4_block(payload, clen, out, cap, len) != 0 || !is_elf64(out, *len)) {
			free(out);
			return NULL;
		}
		return out;
	}
	if (e->payload_size > e->padded_size || !is_elf64(payload, e->payload_size))
		return NULL;
	unsigned char *out = malloc(e->payload_size);
	if (out != NULL) {
		memcpy(out, payload, e->payload_size);
		*len = e->payload_size;
	}
	return out;
}

static unsigned char *fatbin_elf(const struct fatbin_header *h, size_t *len)
{
	if (h->entries_size > MAX_IMAGE || h->header_size < sizeof(*h))
		return NULL;
	const unsigned char *p = (const unsigned char *)h + h->header_size, *end = p + h->entries_size;
	const struct fatbin_entry *best = NULL;
	while ((size_t)(end - p) >= sizeof(struct fatbin_entry)) {
		const struct fatbin_entry *e = (const void *)p;
		if (e->header_size < sizeof(*e) || e->header_size > (size_t)(end - p) ||
		    (size_t)(end - p) - e->header_size < e->padded_size)
			break;
		if (e->kind == FATBIN_KIND_ELF) {
			bool better = best == NULL || (e->sm <= FC_DEVICE_SM && (best->sm > FC_DEVICE_SM || e->sm > best->sm));
			if (better)
				best = e;
		}
		p += e->header_size + e->padded_size;
	}
	return best ? entry_elf(best, len) : NULL;
}

struct fc_modimage *fc_modimage_load(const void *image)
{
	if (image == NULL)
		return NULL;
	unsigned char *elf = NULL;
	size_t len = 0;
	uint32_t magic;
	memcpy(&magic, image, sizeof(magic));
	if (magic == FATBIN_MAGIC) {
		elf = fatbin_elf(image, &len);
	} else if (is_elf64(image, sizeof(Elf64_Ehdr))) {
		/* an ELF's size is where its section headers end */
		const Elf64_Ehdr *eh = image;
		len = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
		if (len <= MAX_IMAGE && (elf = malloc(len)) != NULL)
			memcpy(elf, image, len);
	}
	if (elf == NULL)
		return NULL;
	struct fc_modimage *m = calloc(1, sizeof(*m));
	if (m == NULL) {
		free(elf);
		return NULL;
	}
	m->elf = elf;
	m->len = len;
	pthread_mutex_init(&m->lock, NULL);
	return m;
}

void fc_modimage_free(struct fc_modimage *m)
{
	if (m == NULL)
		return;
	for (struct global *g = m->globals, *next; g != NULL; g = next) {
		next = g->next;
		free(g->name);
		free(g->mem);
		free(g);
	}
	pthread_mutex_destroy(&m->lock);
	free(m->elf);
	free(m);
}

static const Elf64_Shdr *section(const struct fc_modimage *m, size_t i)
{
	const Elf64_Ehdr *eh = (const void *)m->elf;
	if (i >= eh->e_shnum || eh->e_shentsize < sizeof(Elf64_Shdr))
		return NULL;
	size_t off = eh->e_shoff + i * eh->e_shentsize;
	if (off > m->len || m->len - off < sizeof(Elf64_Shdr))
		return NULL;
	return (const void *)(m->elf + off);
}

/* The data object `name` of the cubin: 0 and *sym, or -1. */
static int find_symbol(const struct fc_modimage *m, const char *name, Elf64_Sym *out)
{
	const Elf64_Ehdr *eh = (const void *)m->elf;
	for (size_t i = 0; i < eh->e_shnum; i++) {
		const Elf64_Shdr *sh = section(m, i), *strs = sh ? section(m, sh->sh_link) : NULL;
		if (sh == NULL || sh->sh_type != SHT_SYMTAB || strs == NULL || sh->sh_entsize < sizeof(Elf64_Sym) ||
		    sh->sh_offset > m->len || m->len - sh->sh_offset < sh->sh_size || strs->sh_offset > m->len ||
		    m->len - strs->sh_offset < strs->sh_size)
			continue;
		const char *str = (const char *)m->elf + strs->sh_offset;
		for (size_t off = 0; off + sizeof(Elf64_Sym) <= sh->sh_size; off += sh->sh_entsize) {
			Elf64_Sym s;
			memcpy(&s, m->elf + sh->sh_offset + off, sizeof(s));
			if (ELF64_ST_TYPE(s.st_info) != STT_OBJECT || s.st_name >= strs->sh_size)
				continue;
			const char *n = str + s.st_name;
			if (strnlen(n, strs->sh_size - s.st_name) < strs->sh_size - s.st_name && strcmp(n, name) == 0) {
				*out = s;
				return 0;
			}
		}
	}
	return -1;
}

/* A new global holding the symbol's initial bytes (zeros for uninitialised data). */
static struct global *new_global(const struct fc_modimage *m, const char *name, const Elf64_Sym *s)
{
	struct global *g = calloc(1, sizeof(*g));
	size_t size = s->st_size ? s->st_size : 1;
	if (g == NULL || size > MAX_IMAGE)
		goto fail;
	g->name = strdup(name);
	g->mem = aligned_alloc(256, (size + 255) & ~(size_t)255);
	if (g->name == NULL || g->mem == NULL)
		goto fail;
	memset(g->mem, 0, size);
	g->size = s->st_size;
	/* the symbol's place in its section: st_value is an address (0-based in a cubin) */
	const Elf64_Shdr *sh = s->st_shndx < SHN_LORESERVE ? section(m, s->st_shndx) : NULL;
	if (sh != NULL && sh->sh_type == SHT_PROGBITS && s->st_value >= sh->sh_addr &&
	    s->st_value - sh->sh_addr <= sh->sh_size && sh->sh_offset <= m->len && m->len - sh->sh_offset >= sh->sh_size) {
		size_t at = s->st_value - sh->sh_addr;
		size_t n = sh->sh_size - at < s->st_size ? sh->sh_size - at : s->st_size;
		memcpy(g->mem, m->elf + sh->sh_offset + at, n);
	}
	return g;
fail:
	if (g != NULL) {
		free(g->name);
		free(g->mem);
		free(g);
	}
	return NULL;
}

CUresult fc_modimage_global(struct fc_modimage *m, const char *name, CUdeviceptr *dptr, size_t *bytes)
{
	if (m == NULL)
		return CUDA_ERROR_NOT_FOUND;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&m->lock);
	struct global *g = m->globals;
	while (g != NULL && strcmp(g->name, name) != 0)
		g = g->next;
	if (g == NULL) {
		Elf64_Sym s;
		if (find_symbol(m, name, &s) != 0) {
			rc = CUDA_ERROR_NOT_FOUND;
		} else if ((g = new_global(m, name, &s)) == NULL) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			g->next = m->globals;
			m->globals = g;
		}
	}
	if (g != NULL) {
		if (dptr)
			*dptr = (CUdeviceptr)(uintptr_t)g->mem;
		if (bytes)
			*bytes = g->size;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}
