/*
 * cuGetProcAddress (CUDA 11.3, 4 arguments) and cuGetProcAddress_v2 (CUDA
 * 12.0, 5 arguments). A request for base name B at version V resolves to the
 * newest entry of B whose version is <= V; with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, to its per-thread symbol when
 * there is one. The addresses returned are this library's own (it links with
 * -Bsymbolic), so a preloaded library that interposes on the exported names
 * still receives the real entry points here.
 *
 * FAKECUDA_PROCADDR=private: the answers are private entry points instead,
 * one per exported symbol, of addresses no dlsym returns (procaddr_priv.h),
 * as a driver is free to give; the same symbol always gets the same one.
 * "exported" (or unset) is the default.
 */
#include "drv.h"
#include "procaddr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct fc_pa_row **sorted;
static pthread_once_t sorted_once = PTHREAD_ONCE_INIT;

static int cmp_rows(const void *a, const void *b)
{
	return strcmp((*(const struct fc_pa_row *const *)a)->name, (*(const struct fc_pa_row *const *)b)->name);
}

static void sort_rows(void)
{
	sorted = malloc(fc_pa_nrows * sizeof(*sorted));
	if (sorted == NULL)
		return;
	for (unsigned i = 0; i < fc_pa_nrows; i++)
		sorted[i] = &fc_pa_rows[i];
	qsort(sorted, fc_pa_nrows, sizeof(*sorted), cmp_rows);
}

static int private_answers;
static pthread_once_t mode_once = PTHREAD_ONCE_INIT;

static void read_mode(void)
{
	const char *m = getenv("FAKECUDA_PROCADDR");
	if (m == NULL || *m == 0 || strcmp(m, "exported") == 0)
		return;
	if (strcmp(m, "private") == 0)
		private_answers = 1;
	else
		fprintf(stderr, "fakecuda: FAKECUDA_PROCADDR=%s: expected exported or private; "
				"answering with exported entry points\n", m);
}

static const struct fc_pa_row *find_row(const char *name)
{
	pthread_once(&sorted_once, sort_rows);
	if (sorted == NULL) {
		for (unsigned i = 0; i < fc_pa_nrows; i++)
			if (strcmp(fc_pa_rows[i].name, name) == 0)
				return &fc_pa_rows[i];
		return NULL;
	}
	size_t lo = 0, hi = fc_pa_nrows;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(sorted[mid]->name, name);
		if (c == 0)
			return sorted[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *status)
{
	if (symbol == NULL || pfn == NULL ||
	    (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	const struct fc_pa_row *row = find_row(symbol);
	if (row == NULL || row->nver == 0) {
		if (status)
			*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		return CUDA_ERROR_NOT_FOUND;
	}
	const struct fc_pa_ver *best = NULL;
	for (int i = 0; i < row->nver; i++)
		if (row->ver[i].version <= cudaVersion)
			best = &row->ver[i];
	if (best == NULL) {
		if (status)
			*status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		return CUDA_ERROR_NOT_FOUND;
	}
	pthread_once(&mode_once, read_mode);
	int pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->fn_pt != NULL &&
		 cudaVersion >= row->pt_min;
	if (private_answers)
		*pfn = pt ? best->priv_pt : best->priv;
	else
		*pfn = pt ? best->fn_pt : best->fn;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

FC_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

FC_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				    CUdriverProcAddressQueryResult *symbolStatus)
{
	return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
