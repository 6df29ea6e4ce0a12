/* What fakecuda reads from a module's image: its global variables (modimage.c). */
#ifndef FC_MODIMAGE_H
#define FC_MODIMAGE_H

#include "drv.h"

struct fc_modimage;

/* Reads image (an ELF cubin or a fat binary); NULL when it holds nothing
 * fakecuda can read (PTX, an unknown format): such a module has no globals. */
struct fc_modimage *fc_modimage_load(const void *image);
void fc_modimage_free(struct fc_modimage *m);
/* The global `name`: its address and size (either out-pointer may be NULL);
 * CUDA_ERROR_NOT_FOUND when the image declares no such data object. The same
 * name gives the same address for the module's lifetime. */
CUresult fc_modimage_global(struct fc_modimage *m, const char *name, CUdeviceptr *dptr, size_t *bytes);

#endif
