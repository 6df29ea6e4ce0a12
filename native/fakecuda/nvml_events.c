/*
 * NVML event sets. A fakecuda GPU raises no events (no Xid errors, no clock
 * changes, no ECC), so a set can be created and freed, devices registered for
 * the events NVML reports as supported (none), and a wait times out.
 */
#include "nvml.h"

#include "fc_internal.h"
#include "nvml_fc.h"

#include <stdlib.h>
#include <time.h>

struct nvmlEventSet_st {
	unsigned magic;
};

#define EVENT_SET_MAGIC 0x45564e54u /* "EVNT" */

FC_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	if (set == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!fc_nvml_ready())
		return NVML_ERROR_UNINITIALIZED;
	struct nvmlEventSet_st *s = malloc(sizeof(*s));
	if (s == NULL)
		return NVML_ERROR_MEMORY;
	s->magic = EVENT_SET_MAGIC;
	*set = s;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	if (set == NULL || set->magic != EVENT_SET_MAGIC)
		return NVML_ERROR_INVALID_ARGUMENT;
	set->magic = 0;
	free(set);
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
	if (fc_nvml_dev(device) == NULL || eventTypes == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*eventTypes = 0;
	return NVML_SUCCESS;
}

FC_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
	if (fc_nvml_dev(device) == NULL || set == NULL || set->magic != EVENT_SET_MAGIC)
		return NVML_ERROR_INVALID_ARGUMENT;
	return eventTypes == 0 ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* No event ever comes: sleep for the timeout and say so. */
FC_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, void *data, unsigned int timeoutms)
{
	if (set == NULL || set->magic != EVENT_SET_MAGIC || data == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct timespec ts = { .tv_sec = timeoutms / 1000, .tv_nsec = (long)(timeoutms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
	return NVML_ERROR_TIMEOUT;
}

FC_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, void *data, unsigned int timeoutms)
{
	return nvmlEventSetWait_v2(set, data, timeoutms);
}
