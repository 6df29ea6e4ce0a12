/* plugstack.conf arguments: key=value, parsed here and only here. */
#include "gs.h"

#include <stdio.h>
#include <string.h>

static int copy_path(const char *key, const char *val, char *dst, size_t dstlen, char *err, size_t errlen)
{
	if (val[0] != '/') {
		snprintf(err, errlen, "plugstack.conf argument %s=%s: expected an absolute path", key, val);
		return -1;
	}
	if (strlen(val) >= dstlen) {
		snprintf(err, errlen, "plugstack.conf argument %s=: path longer than %zu bytes", key, dstlen - 1);
		return -1;
	}
	memcpy(dst, val, strlen(val) + 1);
	return 0;
}

static int parse_size_arg(const char *key, const char *val, uint64_t *dst, char *err, size_t errlen)
{
	if (val[0] == '\0') { /* empty: feature off */
		*dst = 0;
		return 0;
	}
	if (gs_parse_size(val, dst) < 0 || *dst == 0) {
		snprintf(err, errlen,
			 "plugstack.conf argument %s=%s: expected a positive size such as 8G, 512M or 8192 (MB)",
			 key, val);
		return -1;
	}
	return 0;
}

/* notice=: what users are told (docs/user-guide.md). */
static int parse_notice(const char *val, int *dst)
{
	static const struct {
		const char *name;
		int mask;
	} v[] = {{"on", GS_NOTICE_REFUSAL | GS_NOTICE_SUMMARY}, {"off", 0},
		 {"refusal", GS_NOTICE_REFUSAL}, {"summary", GS_NOTICE_SUMMARY}};
	size_t i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		if (strcmp(val, v[i].name) == 0) {
			*dst = v[i].mask;
			return 0;
		}
	}
	return -1;
}

int gs_args_parse(struct gs_config *cfg, int ac, char **av, char *err, size_t errlen)
{
	int i;

	memset(cfg, 0, sizeof(*cfg));
	cfg->notice = GS_NOTICE_REFUSAL | GS_NOTICE_SUMMARY;
	snprintf(cfg->lib, sizeof(cfg->lib), "%s", GS_DEFAULT_LIB);
	snprintf(cfg->socket, sizeof(cfg->socket), "%s", GS_DEFAULT_SOCKET);
	cfg->refused[0] = '\0';

	for (i = 0; i < ac; i++) {
		const char *arg = av[i];
		const char *eq = strchr(arg, '=');
		size_t klen;
		const char *val;

		if (!eq) {
			snprintf(err, errlen, "plugstack.conf argument '%s': expected key=value (keys: lib, socket, default, max, refused, nogpu, notice, compute, compute_cap)", arg);
			return -1;
		}
		klen = (size_t)(eq - arg);
		val = eq + 1;
		if (klen == 3 && strncmp(arg, "lib", 3) == 0) {
			if (copy_path("lib", val, cfg->lib, sizeof(cfg->lib), err, errlen) < 0)
				return -1;
		} else if (klen == 6 && strncmp(arg, "socket", 6) == 0) {
			if (copy_path("socket", val, cfg->socket, sizeof(cfg->socket), err, errlen) < 0)
				return -1;
		} else if (klen == 7 && strncmp(arg, "default", 7) == 0) {
			if (parse_size_arg("default", val, &cfg->default_bytes, err, errlen) < 0)
				return -1;
		} else if (klen == 3 && strncmp(arg, "max", 3) == 0) {
			if (parse_size_arg("max", val, &cfg->max_bytes, err, errlen) < 0)
				return -1;
		} else if (klen == 7 && strncmp(arg, "refused", 7) == 0) {
			if (copy_path("refused", val, cfg->refused, sizeof(cfg->refused), err, errlen) < 0)
				return -1;
		} else if (klen == 7 && strncmp(arg, "compute", 7) == 0) {
			if (strcmp(val, "proportional") != 0 && strcmp(val, "off") != 0) {
				snprintf(err, errlen, "plugstack.conf argument compute=%s: expected proportional or off", val);
				return -1;
			}
			snprintf(cfg->compute, sizeof(cfg->compute), "%s", val);
		} else if (klen == 11 && strncmp(arg, "compute_cap", 11) == 0) {
			if (val[0] != '\0' && gs_parse_percent(val, &cfg->compute_cap) < 0) {
				snprintf(err, errlen, "plugstack.conf argument compute_cap=%s: expected a percent from 1 to 100", val);
				return -1;
			}
		} else if (klen == 6 && strncmp(arg, "notice", 6) == 0) {
			if (parse_notice(val, &cfg->notice) < 0) {
				snprintf(err, errlen, "plugstack.conf argument notice=%s: expected on, off, refusal or summary", val);
				return -1;
			}
		} else if (klen == 5 && strncmp(arg, "nogpu", 5) == 0) {
			if (strcmp(val, "hide") == 0) {
				cfg->nogpu_allow = false;
			} else if (strcmp(val, "allow") == 0) {
				cfg->nogpu_allow = true;
			} else {
				snprintf(err, errlen, "plugstack.conf argument nogpu=%s: expected hide or allow", val);
				return -1;
			}
		} else {
			snprintf(err, errlen, "unknown plugstack.conf argument '%.*s' (keys: lib, socket, default, max, refused, nogpu, notice, compute, compute_cap)",
				 (int)klen, arg);
			return -1;
		}
	}
	if (cfg->refused[0] == '\0') {
		/* default: "refused" next to the IPC socket (gpusliced's runtime dir) */
		const char *slash = strrchr(cfg->socket, '/');
		int dirlen = slash ? (int)(slash - cfg->socket) : 0;
		snprintf(cfg->refused, sizeof(cfg->refused), "%.*s/refused", dirlen, cfg->socket);
	}
	if (cfg->max_bytes && cfg->default_bytes > cfg->max_bytes) {
		snprintf(err, errlen, "plugstack.conf: default= is larger than max=");
		return -1;
	}
	return 0;
}
