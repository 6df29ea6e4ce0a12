/*
 * Which devices a process's CUDA sees: the device nodes it could open
 * (FAKECUDA_DEVICE_NODES, devnodes.c) and CUDA_VISIBLE_DEVICES, read once at
 * cuInit.
 */
#include "drv.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What the driver makes of its control and UVM nodes (FAKECUDA_DEVICE_NODES):
 * without /dev/nvidiactl it reaches no GPU (CUDA_ERROR_NO_DEVICE, as with no
 * /dev/nvidia* at all); without /dev/nvidia-uvm cuInit fails with
 * CUDA_ERROR_UNKNOWN ("unknown error", the familiar symptom of an unloaded
 * nvidia_uvm module or a container not given the node). */
CUresult fc_nodes_status(void)
{
	const struct fc_devnodes *n = fc_devnodes();
	if (!n->enabled)
		return CUDA_SUCCESS;
	if (n->ctl != FC_NODE_OK)
		return CUDA_ERROR_NO_DEVICE;
	if (n->uvm != FC_NODE_OK)
		return CUDA_ERROR_UNKNOWN;
	return CUDA_SUCCESS;
}

/*
 * CUDA_VISIBLE_DEVICES as the driver reads it: comma-separated entries, each
 * an index or a "GPU-" UUID (a unique prefix suffices); devices are
 * renumbered from 0 in the order given; the list ends at the first entry that
 * is invalid, ambiguous or a repeat. Unset = every device; "" = none.
 * The driver enumerates only the GPUs whose device node it could open
 * (FAKECUDA_DEVICE_NODES): indices count those, and a denied GPU's UUID
 * matches nothing, so a job under a device cgroup sees its GPUs as 0..n-1
 * and never reaches another.
 */
void fc_compute_visible(void)
{
	unsigned ndev = 0, usable[FC_MAX_DEVICES];
	for (unsigned i = 0; i < fc_shm->ndev; i++)
		if (fc_devnode_gpu_usable(i))
			usable[ndev++] = i;
	const char *env = getenv("CUDA_VISIBLE_DEVICES");
	fc_nvisible = 0;
	if (env == NULL) {
		for (unsigned i = 0; i < ndev; i++)
			fc_visible[fc_nvisible++] = usable[i];
		return;
	}
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", env);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		while (isspace((unsigned char)*tok))
			tok++;
		size_t n = strlen(tok);
		while (n && isspace((unsigned char)tok[n - 1]))
			tok[--n] = 0;
		int found = -1;
		if (n > 0 && isdigit((unsigned char)tok[0])) {
			char *end;
			unsigned long v = strtoul(tok, &end, 10);
			if (*end == 0 && v < ndev)
				found = (int)usable[v];
		} else if (strncasecmp(tok, "GPU-", 4) == 0 && n > 4) {
			for (unsigned i = 0; i < ndev; i++) {
				if (strncasecmp(fc_shm->dev[usable[i]].uuid, tok, n) == 0) {
					if (found >= 0) { /* ambiguous prefix */
						found = -1;
						break;
					}
					found = (int)usable[i];
				}
			}
		}
		if (found < 0)
			break;
		bool dup = false;
		for (unsigned k = 0; k < fc_nvisible; k++)
			dup |= fc_visible[k] == (unsigned)found;
		if (dup || fc_nvisible == FC_MAX_DEVICES)
			break;
		fc_visible[fc_nvisible++] = (unsigned)found;
	}
}
