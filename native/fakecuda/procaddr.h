/* The cuGetProcAddress table (procaddr.c is generated from entry-points.tsv). */
#ifndef FC_PROCADDR_H
#define FC_PROCADDR_H

struct fc_pa_ver {
	int version;   /* CUDA version the entry appeared in */
	void *fn;      /* what a legacy-stream lookup returns */
	void *fn_pt;   /* what a per-thread-default-stream lookup returns (0: same as fn) */
	void *priv;    /* fn's private entry point (FAKECUDA_PROCADDR=private) */
	void *priv_pt; /* fn_pt's (0: none) */
};

struct fc_pa_row {
	const char *name; /* base name */
	int pt_min;       /* per-thread variants exist from this version on (0: with the entry) */
	int nver;
	const struct fc_pa_ver *ver; /* ascending */
};

extern const struct fc_pa_row fc_pa_rows[];
extern const unsigned fc_pa_nrows;

#endif
