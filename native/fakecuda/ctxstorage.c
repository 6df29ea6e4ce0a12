/*
 * Context-local storage: values a caller (NVIDIA's runtime) attaches to a
 * context under a key of its own, with a destructor the driver runs when the
 * context goes (cuCtxDestroy, the last release or a reset of a primary
 * context). The runtime keeps its per-context state here and finds it again
 * by (context, key); after cudaDeviceReset it must find nothing, or it would
 * use state that belonged to the old context.
 */
#include "exporttable.h"

#include <stdlib.h>

struct cls_entry {
	struct cls_entry *next;
	CUcontext ctx;
	void *key;
	void *value;
	fc_cls_dtor dtor;
};

static pthread_mutex_t cls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cls_entry *cls_head;

static CUresult resolve(CUcontext *ctx)
{
	FC_CHECK_INIT();
	if (*ctx == NULL)
		*ctx = fc_current();
	if (!fc_ctx_valid(*ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_SUCCESS;
}

/* The entry of (ctx, key) with cls_lock held; NULL if none. A context's
 * entries go when it does, so a reused context address finds none. */
static struct cls_entry **find(CUcontext ctx, void *key)
{
	for (struct cls_entry **p = &cls_head; *p != NULL; p = &(*p)->next)
		if ((*p)->ctx == ctx && (*p)->key == key)
			return p;
	return NULL;
}

CUresult fc_cls_insert(CUcontext ctx, void *key, void *value, fc_cls_dtor dtor)
{
	CUresult rc = resolve(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&cls_lock);
	struct cls_entry **p = find(ctx, key);
	struct cls_entry *e = p ? *p : calloc(1, sizeof(*e));
	if (e == NULL) {
		pthread_mutex_unlock(&cls_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (p == NULL) {
		e->ctx = ctx;
		e->key = key;
		e->next = cls_head;
		cls_head = e;
	}
	e->value = value;
	e->dtor = dtor;
	pthread_mutex_unlock(&cls_lock);
	return CUDA_SUCCESS;
}

CUresult fc_cls_remove(CUcontext ctx, void *key)
{
	CUresult rc = resolve(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&cls_lock);
	struct cls_entry **p = find(ctx, key);
	struct cls_entry *e = NULL;
	if (p != NULL) {
		e = *p;
		*p = e->next;
	}
	pthread_mutex_unlock(&cls_lock);
	free(e);
	return CUDA_SUCCESS;
}

CUresult fc_cls_get(void **value, CUcontext ctx, void *key)
{
	if (value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = resolve(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&cls_lock);
	struct cls_entry **p = find(ctx, key);
	if (p != NULL)
		*value = (*p)->value;
	pthread_mutex_unlock(&cls_lock);
	return p != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

void fc_cls_ctx_teardown(CUcontext ctx)
{
	/* unlink first, then run the destructors unlocked: they call back into the driver */
	struct cls_entry *gone = NULL, **tail = &gone; /* newest first, as stored */
	pthread_mutex_lock(&cls_lock);
	for (struct cls_entry **p = &cls_head; *p != NULL;) {
		struct cls_entry *e = *p;
		if (e->ctx == ctx) {
			*p = e->next;
			e->next = NULL;
			*tail = e;
			tail = &e->next;
		} else {
			p = &e->next;
		}
	}
	pthread_mutex_unlock(&cls_lock);
	while (gone != NULL) {
		struct cls_entry *e = gone;
		gone = e->next;
		if (e->dtor != NULL)
			e->dtor(ctx, e->key, e->value);
		free(e);
	}
}
