/* The value the runtime's driver check expects (integrity.c). */
#ifndef FC_INTEGRITY_H
#define FC_INTEGRITY_H

#include <stdint.h>

#include "fc_internal.h"

struct fc_integrity_device {
	uint8_t uuid[16];
	int32_t pci_domain, pci_bus, pci_device;
};

struct fc_integrity_input {
	uint32_t driver_version;
	uint32_t runtime_version;
	uint64_t seconds;
	const void *runtime_table; /* the runtime interface table */
	const void *check_table;   /* the table holding the check */
	const void *check_fn;      /* the check's own address */
	unsigned ndev;
	struct fc_integrity_device dev[FC_MAX_DEVICES];
};

void fc_integrity_value(const struct fc_integrity_input *in, uint64_t out[2]);

#endif
