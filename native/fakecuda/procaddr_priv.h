/*
 * Private entry points, for FAKECUDA_PROCADDR=private: cuGetProcAddress may
 * answer with an address that is none of the driver's exported symbols (the
 * API promises a function, not which one). FC_PA_PRIVATE(N, SYM) defines
 * fc_pa_priv_N, a hidden function of its own address that jumps to SYM's
 * definition in this library (bound here by -Bsymbolic, so a preloaded
 * library interposing on SYM is not reached through it), with every
 * argument register untouched. Included by the generated procaddr.c only.
 */
#ifndef FC_PROCADDR_PRIV_H
#define FC_PROCADDR_PRIV_H

#if defined(__x86_64__)
#define FC_PA_JUMP(sym) "\tendbr64\n\tjmp " #sym "@PLT\n"
#elif defined(__aarch64__)
#define FC_PA_JUMP(sym) "\thint 34\n\tb " #sym "\n" /* bti c */
#endif

#ifndef FC_PA_JUMP
#error "fakecuda's private entry points are written for x86_64 and aarch64"
#endif

#define FC_PA_PRIVATE(n, sym)                                                          \
	__asm__(".text\n\t.p2align 4\n\t.globl fc_pa_priv_" #n "\n\t.hidden fc_pa_priv_" #n \
		"\n\t.type fc_pa_priv_" #n ", %function\nfc_pa_priv_" #n ":\n" FC_PA_JUMP(sym)  \
		"\t.size fc_pa_priv_" #n ", .-fc_pa_priv_" #n "\n");                          \
	extern void fc_pa_priv_##n(void) __attribute__((visibility("hidden")));

#endif
