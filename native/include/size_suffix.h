/*
 * Size suffixes shared by the fakecuda configuration (FAKECUDA_DEVICES) and
 * the example programs: "", "B", "K"/"KiB", "M"/"MiB", "G"/"GiB",
 * "T"/"TiB" (powers of 1024, any case).
 */
#ifndef GPUSLICE_SIZE_SUFFIX_H
#define GPUSLICE_SIZE_SUFFIX_H

#include <strings.h>

/* The shift (0, 10, 20, 30 or 40) a suffix stands for, or -1 when the text
 * after the number is not a size suffix. */
static inline int size_suffix_shift(const char *suffix)
{
	static const struct {
		const char *one, *two;
		int shift;
	} units[] = {
		{"", "B", 0}, {"K", "KiB", 10}, {"M", "MiB", 20}, {"G", "GiB", 30}, {"T", "TiB", 40},
	};
	for (unsigned i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcasecmp(suffix, units[i].one) == 0 || strcasecmp(suffix, units[i].two) == 0)
			return units[i].shift;
	return -1;
}

#endif
