/* The lines at the end of a step (summary.c). */
#ifndef GPUSLICE_SPANK_SUMMARY_H
#define GPUSLICE_SPANK_SUMMARY_H

#include <stddef.h>

#define GS_SUMMARY_MAX_GPUS 16

/* From gpusliced's session object (json, len bytes): one line with the
 * job's peak, quota and refusals per GPU of the node, and one with what to
 * ask next time when there is advice, into buf (NUL-terminated, whole
 * lines). job, step ("step 0", "batch step") and node name where they were
 * measured. The number of bytes written; 0 when the object has no GPU or
 * cannot be read. */
size_t gs_summary_format(const char *json, size_t len, const char *job, const char *step, const char *node,
			 char *buf, size_t cap);

#endif
