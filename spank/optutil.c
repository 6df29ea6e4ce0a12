/* What every option table of the plugin shares (option.c: --gpu-mem,
 * compute.c: --gpu-compute, --gpu-compute-max): registering a table, and
 * a callback's recording of its value. */
#include "gs.h"

#include <stdlib.h>
#include <string.h>

int gs_option_record(char **dst, const char *optarg, const char *name)
{
	char *copy;

	if (!optarg)
		return 0;
	copy = strdup(optarg);
	if (!copy) {
		gs_error("out of memory recording --%s", name);
		return -1;
	}
	free(*dst);
	*dst = copy;
	return 0;
}

int gs_options_register(spank_t sp, struct spank_option *table)
{
	struct spank_option *o;
	int rc;

	for (o = table; o->name; o++) {
		rc = spank_option_register(sp, o);
		if (rc != ESPANK_SUCCESS) {
			gs_error("cannot register --%s: %s", o->name, spank_strerror(rc));
			return -1;
		}
	}
	return 0;
}
