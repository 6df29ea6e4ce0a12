/*
 * FAKECUDA_DEVICE_NODES: the device files NVIDIA's driver opens.
 *
 * NVIDIA's libcuda and NVML reach the kernel driver through character
 * devices: /dev/nvidiactl (the control node), /dev/nvidia-uvm (unified
 * memory, libcuda only) and /dev/nvidiaN, one per GPU (major 195, minor N).
 * A device cgroup (Slurm's ConstrainDevices=yes: an eBPF program on the
 * job's cgroup v2) is checked at open(2), before any driver, so it is what
 * hides a GPU a job was not given.
 *
 * With FAKECUDA_DEVICE_NODES=<dir> fakecuda opens <dir>/nvidiactl,
 * <dir>/nvidia-uvm and <dir>/nvidia<N> for each physical GPU once per
 * process, and keeps what it opened open (close-on-exec) for the process's
 * lifetime, as the driver does. Without a kernel driver owning major 195
 * (any machine fakecuda runs on) an open that the device cgroup and the
 * file's mode allow fails with ENXIO (or ENODEV): that is "present and
 * allowed". EPERM (device cgroup) and EACCES (file mode) are "denied",
 * ENOENT "absent". Unset, no node is opened (this machine has no
 * /dev/nvidia*), which is every test's default.
 */
#include "fc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct fc_devnodes nodes;
static pthread_once_t nodes_once = PTHREAD_ONCE_INIT;

static enum fc_node_state open_node(const char *dir, const char *name)
{
	char path[4096];
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return FC_NODE_ABSENT;
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (fd >= 0)
		return FC_NODE_OK; /* kept open for the process's lifetime, as the driver does */
	switch (errno) {
	case ENXIO:
	case ENODEV:
		return FC_NODE_OK; /* allowed; no driver behind it on this machine */
	case EPERM:
		return FC_NODE_DENIED_CGROUP;
	case EACCES:
		return FC_NODE_DENIED_MODE;
	default:
		return FC_NODE_ABSENT;
	}
}

static void open_all(void)
{
	const char *dir = getenv("FAKECUDA_DEVICE_NODES");
	if (dir == NULL || *dir == 0)
		return;
	nodes.enabled = true;
	nodes.ctl = open_node(dir, "nvidiactl");
	nodes.uvm = open_node(dir, "nvidia-uvm");
	for (unsigned i = 0; i < FC_MAX_DEVICES; i++) {
		char name[32];
		if (i >= fc_shm->ndev) {
			nodes.gpu[i] = FC_NODE_ABSENT;
			continue;
		}
		snprintf(name, sizeof(name), "nvidia%u", i);
		nodes.gpu[i] = open_node(dir, name);
	}
}

const struct fc_devnodes *fc_devnodes(void)
{
	if (fc_shm == NULL)
		return &nodes; /* not enabled yet: the state is needed for the GPU count */
	pthread_once(&nodes_once, open_all);
	return &nodes;
}

bool fc_devnode_gpu_usable(unsigned phys)
{
	const struct fc_devnodes *n = fc_devnodes();
	return !n->enabled || (phys < FC_MAX_DEVICES && n->gpu[phys] == FC_NODE_OK);
}
