/* What nvml.c shares with the other NVML files (internal, not exported). */
#ifndef FC_NVML_FC_H
#define FC_NVML_FC_H

#include "nvml.h"

#include "fc_internal.h"

typedef struct nvmlEventSet_st *nvmlEventSet_t;

/* Whether nvmlInit has been called (and not undone by nvmlShutdown). */
FC_HIDDEN bool fc_nvml_ready(void);
/* The device behind a handle, or NULL when NVML is not initialised or the
 * handle is not one of ours. */
FC_HIDDEN struct fc_shm_dev *fc_nvml_dev(nvmlDevice_t device);
/* The handle of physical device idx, or NULL when there is none. */
FC_HIDDEN nvmlDevice_t fc_nvml_handle(unsigned idx);
/* The physical index behind a valid handle. */
FC_HIDDEN unsigned fc_nvml_index(nvmlDevice_t device);

/* Calls put(arr, i, pid, bytes) for the first cap processes that hold memory
 * or a context on physical device idx; returns how many there are. */
FC_HIDDEN unsigned fc_nvml_procs(unsigned idx, unsigned cap, void (*put)(void *, unsigned, uint32_t, uint64_t),
				 void *arr);

/* The name NVML gives process pid: its executable's path when it can be read
 * (the caller's own processes), else its command name; "" when it is gone. */
FC_HIDDEN void fc_nvml_proc_name(unsigned pid, char *name, size_t len);

#endif
