/*
 * fakecuda's model of GPU time: what a program (or test) may pass to a
 * launch to say how long the kernel runs on the modelled GPU. See
 * docs/fakecuda-apis.md, "GPU time".
 *
 * A launch through cuLaunchKernel's `extra` array may carry
 *     { FAKECUDA_LAUNCH_PARAM_NS, &ns, CU_LAUNCH_PARAM_END }
 * with `ns` an unsigned long long: the kernel then takes ns nanoseconds of
 * GPU time instead of what its grid gives. The key is fakecuda's own; the
 * real driver refuses it, so only programs written for fakecuda pass it.
 */
#ifndef FAKECUDA_TIME_H
#define FAKECUDA_TIME_H

#define FAKECUDA_LAUNCH_PARAM_NS ((void *)0x0FCA0001)

#endif
