// Package plugstack exposes the SPANK plugin's plugstack.conf parser
// (spank/args.c) and its --gpu-compute options (spank/compute.c, with the
// option helpers of spank/optutil.c) through
// cgo, with Slurm's functions replaced by recorders, so that what a line
// of plugstack.conf and a command line give the Prolog is checked without
// a cluster.
package plugstack

/*
#cgo CFLAGS: -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -Wno-unused-parameter
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include "../../args.c"
#include "../../compute.c"
#include "../../optutil.c"
#include "../../size.c"

struct gs_config gs_config;
static char last_error[512];
static char ctl[2][2][64]; // job control environment: name, value
static int nctl;
static struct spank_option *registered[8];
static int nreg;

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt) { registered[nreg++] = opt; return ESPANK_SUCCESS; }
const char *spank_strerror(spank_err_t err) { return "error"; }
spank_err_t spank_job_control_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
	if (nctl < 2) {
		snprintf(ctl[nctl][0], 64, "%s", var);
		snprintf(ctl[nctl][1], 64, "%s", val);
		nctl++;
	}
	return ESPANK_SUCCESS;
}
void slurm_error(const char *fmt, ...) { va_list ap; va_start(ap, fmt); vsnprintf(last_error, sizeof(last_error), fmt, ap); va_end(ap); }
void slurm_verbose(const char *fmt, ...) { (void)fmt; }

static int parse(char *line, char *err, size_t errlen)
{
	char *av[16];
	int ac = 0;
	for (char *t = strtok(line, " "); t && ac < 16; t = strtok(NULL, " "))
		av[ac++] = t;
	return gs_args_parse(&gs_config, ac, av, err, errlen);
}

// opt: 0 --gpu-compute, 1 --gpu-compute-max; arg NULL: not given
static int submit(const char *share, const char *max)
{
	nreg = 0;
	nctl = 0;
	last_error[0] = 0;
	gs_compute_cleanup();
	gs_compute_register(NULL);
	if (share)
		registered[0]->cb(0, share, 0);
	if (max)
		registered[1]->cb(0, max, 0);
	if (gs_compute_check() < 0)
		return -1;
	return gs_compute_publish(NULL);
}
static const char *ctl_name(int i) { return ctl[i][0]; }
static const char *ctl_value(int i) { return ctl[i][1]; }
static int ctl_count(void) { return nctl; }
static const char *error_text(void) { return last_error; }
static int notice(void) { return gs_config.notice; }
*/
import "C"

import (
	"errors"
	"unsafe"
)

// Parse parses one plugstack.conf argument list into the plugin's config.
func Parse(args string) error {
	line := C.CString(args)
	defer C.free(unsafe.Pointer(line))
	var buf [512]C.char
	if C.parse(line, &buf[0], C.size_t(len(buf))) != 0 {
		return errors.New(C.GoString(&buf[0]))
	}
	return nil
}

// Submit runs the options of a submission (nil: not given) after Parse and
// returns the job control environment the Prolog will see, or the message
// srun prints.
func Submit(share, max *string) (map[string]string, error) {
	var cs, cm *C.char
	if share != nil {
		cs = C.CString(*share)
		defer C.free(unsafe.Pointer(cs))
	}
	if max != nil {
		cm = C.CString(*max)
		defer C.free(unsafe.Pointer(cm))
	}
	if C.submit(cs, cm) != 0 {
		return nil, errors.New(C.GoString(C.error_text()))
	}
	env := map[string]string{}
	for i := 0; i < int(C.ctl_count()); i++ {
		env[C.GoString(C.ctl_name(C.int(i)))] = C.GoString(C.ctl_value(C.int(i)))
	}
	return env, nil
}

// Notice is what notice= left in the config: GS_NOTICE_REFUSAL (1) |
// GS_NOTICE_SUMMARY (2).
func Notice() int { return int(C.notice()) }
