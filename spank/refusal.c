/*
 * A job whose quota gpusliced refused: the Prolog exits 0 (a failing Prolog
 * would drain the node) and leaves one line in <refused=>/<jobid>. Here, in
 * each task, that line goes to the user (srun/salloc's terminal, the batch
 * output file) and the task fails, which fails the job; the node stays in
 * service. The file is root's; the task reads it as the job's user.
 */
#include "gs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int gs_refusal_check(const char *jobid)
{
	char path[4200], line[1024];
	const char *msg = line;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", gs_config.refused, jobid);
	f = fopen(path, "re");
	if (!f) {
		if (errno != ENOENT)
			gs_debug("job %s: cannot read %s: %s", jobid, path, strerror(errno));
		return 0;
	}
	if (!fgets(line, sizeof(line), f))
		snprintf(line, sizeof(line), "job %s: GPU memory quota refused on this node", jobid);
	fclose(f);
	n = strcspn(line, "\n");
	line[n] = '\0';
	if (strncmp(msg, GS_PLUGIN ": ", strlen(GS_PLUGIN) + 2) == 0)
		msg += strlen(GS_PLUGIN) + 2;
	gs_error("%s", msg);
	return -1;
}
