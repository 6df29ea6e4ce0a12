/*
 * NVML utilisation from the modelled GPU time (timeline.c):
 * nvmlDeviceGetUtilizationRates (the device's busy percent over the last
 * full sample period: 100 ms, FAKECUDA_NVML_SAMPLE_NS) and
 * nvmlDeviceGetProcessUtilization (one sample per process and period in
 * which it ran: its percent of that period, stamped with the period's end
 * in CLOCK_REALTIME microseconds).
 */
#include "nvml_fc.h"
#include "timeline.h"

#include <stdlib.h>

FC_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
	if (!fc_nvml_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (fc_nvml_dev(device) == NULL || utilization == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned pct = 0;
	if (fc_tl_device_util(fc_nvml_index(device), &pct) != 0)
		return NVML_ERROR_UNKNOWN;
	utilization->gpu = pct;
	utilization->memory = 0; /* memory bandwidth is not modelled */
	return NVML_SUCCESS;
}

/* As NVML: with utilization NULL, *count is set to a fixed 100 and
 * NVML_ERROR_INSUFFICIENT_SIZE returned (below); with *count too small
 * for the samples newer than lastSeenTimeStamp, *count is set to the
 * samples there are and NVML_ERROR_INSUFFICIENT_SIZE returned; no sample
 * newer than lastSeenTimeStamp gives NVML_ERROR_NOT_FOUND. */
#define FC_NVML_UTIL_QUERY_COUNT 100

FC_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
						    unsigned int *processSamplesCount,
						    unsigned long long lastSeenTimeStamp)
{
	if (!fc_nvml_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (fc_nvml_dev(device) == NULL || processSamplesCount == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	/* Asked with no buffer, NVIDIA's driver answers a fixed count (100)
	 * whatever the samples kept since lastSeenTimeStamp (go-nvml issues 11
	 * and 27): a buffer of that size can be too small, and the call with
	 * it then answers INSUFFICIENT_SIZE. */
	if (utilization == NULL) {
		unsigned n = fc_tl_process_samples(fc_nvml_index(device), lastSeenTimeStamp, NULL, 0);
		*processSamplesCount = FC_NVML_UTIL_QUERY_COUNT;
		return n == 0 ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INSUFFICIENT_SIZE;
	}
	unsigned cap = *processSamplesCount;
	struct fc_tl_sample *buf = cap ? calloc(cap, sizeof(*buf)) : NULL;
	if (cap && buf == NULL)
		return NVML_ERROR_MEMORY;
	unsigned n = fc_tl_process_samples(fc_nvml_index(device), lastSeenTimeStamp, buf, cap);
	nvmlReturn_t rv = NVML_SUCCESS;
	if (n == 0) {
		rv = NVML_ERROR_NOT_FOUND;
	} else if (n > cap) {
		rv = NVML_ERROR_INSUFFICIENT_SIZE;
	} else {
		for (unsigned i = 0; i < n; i++) {
			utilization[i].pid = buf[i].pid;
			utilization[i].timeStamp = buf[i].time_us;
			utilization[i].smUtil = buf[i].sm_pct;
			utilization[i].memUtil = 0;
			utilization[i].encUtil = 0;
			utilization[i].decUtil = 0;
		}
	}
	*processSamplesCount = n;
	free(buf);
	return rv;
}
