/*
 * Streams and events on the modelled GPU (timeline.c). A process's work on
 * one GPU runs in launch order; a stream remembers the sequence number of
 * its last launch and an event the one it was recorded after, so
 * synchronising waits until the timeline has run that far, queries answer
 * CUDA_ERROR_NOT_READY before, and an event's time is when that work
 * completed on the GPU. Host callbacks run at once.
 */
#include "drv.h"
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct CUstream_st {
	uint32_t magic;
	CUcontext ctx;
	unsigned flags;
	int priority;
	unsigned long long id;
	uint64_t last; /* sequence number of its last launch on the timeline */
};

struct CUevent_st {
	uint32_t magic;
	CUcontext ctx;
	unsigned flags;
	bool recorded;
	unsigned phys;
	uint64_t seq;  /* the work it waits for (0: none) */
	uint64_t when; /* modelled time it completed (ns); 0 until known */
};

static _Atomic unsigned long long next_stream_id = 3; /* 0..2: null, legacy, per-thread */

CUcontext fc_stream_ctx(CUstream s, CUresult *err)
{
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
		CUcontext c = fc_tls_ctx;
		if (!fc_ctx_valid(c)) {
			*err = CUDA_ERROR_INVALID_CONTEXT;
			return NULL;
		}
		return c;
	}
	if (s->magic != FC_MAGIC_STREAM || !fc_ctx_valid(s->ctx)) {
		*err = CUDA_ERROR_INVALID_HANDLE;
		return NULL;
	}
	return s->ctx;
}

/* ---- streams ---- */
FC_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	FC_REQUIRE_CTX(c);
	if (phStream == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->ctx = c;
	s->flags = flags;
	s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
	s->id = atomic_fetch_add(&next_stream_id, 1);
	s->magic = FC_MAGIC_STREAM;
	*phStream = s;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	return cuStreamCreateWithPriority(phStream, Flags, 0);
}

FC_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	FC_CHECK_INIT();
	if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
	    hStream->magic != FC_MAGIC_STREAM)
		return CUDA_ERROR_INVALID_HANDLE;
	hStream->magic = FC_MAGIC_DEAD; /* kept readable: a stale handle reads as invalid */
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamDestroy(CUstream hStream)
{
	return cuStreamDestroy_v2(hStream);
}

#define STREAM_OP(s)                                      \
	FC_CHECK_INIT();                                  \
	CUresult err_ = CUDA_SUCCESS;                     \
	CUcontext sctx_ = fc_stream_ctx((s), &err_);      \
	if (sctx_ == NULL)                                \
		return err_;                              \
	(void)sctx_

static bool is_named(CUstream s)
{
	return s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD;
}

/* The last work queued on stream s of context c: a created stream's own;
 * the default streams wait for all of the process's work on the GPU. */
static uint64_t stream_last(CUstream s, CUcontext c)
{
	return is_named(s) ? s->last : fc_tl_last(c->phys);
}

CUresult fc_stream_submit(CUstream s, uint64_t ns)
{
	STREAM_OP(s);
	uint64_t seq = fc_tl_submit(sctx_->phys, ns);
	if (is_named(s) && seq != 0)
		s->last = seq;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamSynchronize(CUstream hStream)
{
	STREAM_OP(hStream);
	fc_tl_wait(sctx_->phys, stream_last(hStream, sctx_));
	fc_pools_sync();
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamQuery(CUstream hStream)
{
	STREAM_OP(hStream);
	return fc_tl_done(sctx_->phys, stream_last(hStream, sctx_)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static bool event_valid(CUevent e)
{
	return e != NULL && e->magic == FC_MAGIC_EVENT;
}

FC_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	STREAM_OP(hStream);
	if (!event_valid(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	STREAM_OP(hStream);
	if (flags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = (hStream && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD) ? hStream->flags : 0;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
	STREAM_OP(hStream);
	if (priority == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*priority = (hStream && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD) ? hStream->priority : 0;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	STREAM_OP(hStream);
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = sctx_;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
	STREAM_OP(hStream);
	if (streamId == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (hStream == NULL || hStream == CU_STREAM_LEGACY)
		*streamId = 1;
	else if (hStream == CU_STREAM_PER_THREAD)
		*streamId = 2;
	else
		*streamId = hStream->id;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
	STREAM_OP(hStream);
	if (callback == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	callback(hStream, CUDA_SUCCESS, userData);
	return CUDA_SUCCESS;
}

FC_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	STREAM_OP(hStream);
	if (fn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	fn(userData);
	return CUDA_SUCCESS;
}

FC_PT_WRAP(CUresult, cuStreamSynchronize, _ptsz, (CUstream s), (s))
FC_PT_WRAP(CUresult, cuStreamQuery, _ptsz, (CUstream s), (s))
FC_PT_WRAP(CUresult, cuStreamWaitEvent, _ptsz, (CUstream s, CUevent e, unsigned int f), (s, e, f))
FC_PT_WRAP(CUresult, cuStreamGetFlags, _ptsz, (CUstream s, unsigned int *f), (s, f))
FC_PT_WRAP(CUresult, cuStreamGetPriority, _ptsz, (CUstream s, int *p), (s, p))
FC_PT_WRAP(CUresult, cuStreamGetCtx, _ptsz, (CUstream s, CUcontext *c), (s, c))
FC_PT_WRAP(CUresult, cuStreamGetId, _ptsz, (CUstream s, unsigned long long *i), (s, i))
FC_PT_WRAP(CUresult, cuStreamAddCallback, _ptsz, (CUstream s, CUstreamCallback cb, void *u, unsigned int f),
	   (s, cb, u, f))
FC_PT_WRAP(CUresult, cuLaunchHostFunc, _ptsz, (CUstream s, CUhostFn fn, void *u), (s, fn, u))

/* ---- events ---- */
FC_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	FC_REQUIRE_CTX(c);
	if (phEvent == NULL ||
	    (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)) ||
	    ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUevent_st *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->ctx = c;
	e->flags = Flags;
	e->magic = FC_MAGIC_EVENT;
	*phEvent = e;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	STREAM_OP(hStream);
	if (!event_valid(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	hEvent->phys = sctx_->phys;
	hEvent->seq = stream_last(hStream, sctx_);
	hEvent->when = fc_tl_done(hEvent->phys, hEvent->seq) ? fc_tl_end_time(hEvent->phys, 0) : 0;
	if (hEvent->when != 0)
		hEvent->seq = 0;
	hEvent->recorded = true;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	return cuEventRecordWithFlags(hEvent, hStream, 0);
}

FC_PT_WRAP(CUresult, cuEventRecord, _ptsz, (CUevent e, CUstream s), (e, s))
FC_PT_WRAP(CUresult, cuEventRecordWithFlags, _ptsz, (CUevent e, CUstream s, unsigned int f), (e, s, f))

/* Whether the event's work is complete; fills in its time when it is. */
static bool event_done(CUevent e)
{
	if (!e->recorded || e->when != 0)
		return true;
	if (!fc_tl_done(e->phys, e->seq))
		return false;
	e->when = fc_tl_end_time(e->phys, e->seq);
	return true;
}

FC_API CUresult cuEventQuery(CUevent hEvent)
{
	FC_CHECK_INIT();
	if (!event_valid(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	return event_done(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FC_API CUresult cuEventSynchronize(CUevent hEvent)
{
	FC_CHECK_INIT();
	if (!event_valid(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	if (hEvent->recorded && hEvent->when == 0)
		fc_tl_wait(hEvent->phys, hEvent->seq);
	event_done(hEvent);
	fc_pools_sync();
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
	FC_CHECK_INIT();
	if (!event_valid(hEvent))
		return CUDA_ERROR_INVALID_HANDLE;
	hEvent->magic = FC_MAGIC_DEAD;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventDestroy(CUevent hEvent)
{
	return cuEventDestroy_v2(hEvent);
}

FC_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	FC_CHECK_INIT();
	if (pMilliseconds == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!event_valid(hStart) || !event_valid(hEnd) || ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) ||
	    !hStart->recorded || !hEnd->recorded)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!event_done(hStart) || !event_done(hEnd))
		return CUDA_ERROR_NOT_READY;
	*pMilliseconds = (float)(((double)hEnd->when - (double)hStart->when) / 1e6);
	return CUDA_SUCCESS;
}

