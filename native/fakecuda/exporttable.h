/* The driver's private tables (exporttable.c) and the context-local storage
 * behind one of them (ctxstorage.c). Driver-internal. */
#ifndef FC_EXPORTTABLE_H
#define FC_EXPORTTABLE_H

#include "drv.h"

typedef void (*fc_cls_dtor)(CUcontext ctx, void *key, void *value);

/* Stores value under key in ctx (NULL: the current context); replaces an
 * earlier value of the same key. dtor, when set, is called with (ctx, key,
 * value) when the context is destroyed or the primary context reset. */
CUresult fc_cls_insert(CUcontext ctx, void *key, void *value, fc_cls_dtor dtor);
/* Forgets key in ctx (NULL: current) without calling its destructor. */
CUresult fc_cls_remove(CUcontext ctx, void *key);
/* The value stored under key in ctx (NULL: current); CUDA_ERROR_INVALID_VALUE when none. */
CUresult fc_cls_get(void **value, CUcontext ctx, void *key);
/* Called as ctx goes away: runs and drops every destructor stored for it. */
void fc_cls_ctx_teardown(CUcontext ctx);

/* The primary context of dev, not retained (ctx.c). */
CUresult fc_primary_ctx_peek(CUcontext *pctx, CUdevice dev);

#endif
