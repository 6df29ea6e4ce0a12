"""A job's process that runs without the interceptor (LD_PRELOAD removed, a
static binary) and takes more than the job's quota is seen by gpusliced's
audit in the driver's own per-process figures (NVML) and killed. The same
program with the interceptor is refused the allocation and keeps running.
Records what NVML's process list says about the pids of this machine: our
pid, another namespace's, or none (then the audit cannot see anything, and
this case says so)."""

import os
import time

from harness import CaseError, MiB, fmt_bytes

NAME = "audit_stops_unpreloaded_overrun"
PROVES = "a process without the interceptor over its job's quota is stopped by the audit (NVML figures)"
ORDER = 60
TIMEOUT = 90


def run(h, c):
    if os.getuid() != 0:
        raise CaseError("needs root: gpusliced knows a job's processes by a root slurmstepd above them")
    ctx = h.ctx_cost()
    quota = ctx + 256 * MiB
    job = str(900000 + os.getpid() % 90000)
    steps = ["pid", "dev:0", "alloc:512M", "pause"]
    c.fig("quota_bytes", quota)
    with h.session(quota, sid=job) as s:
        # with the interceptor: refused, not killed
        p = h.in_job(job, [os.path.join(h.probes, "gs_probe")] + steps, s.env, "with")
        p.until("paused", 60)
        c.fig("with_alloc_rc", p.last("alloc").get("rc"))
        c.expect(p.last("alloc").get("rc") == "2", "with the interceptor 512 MiB past the quota: %s" % p.last("alloc"))
        p.cont()
        rc = p.wait(30)
        c.expect(rc == 0, "the process with the interceptor ended %s (the audit should have no reason to stop it)" % (
            p.status()))
        # without: the audit's business
        p = h.in_job(job, [os.path.join(h.probes, "gs_probe")] + steps + ["sleep:20000"], h.env(), "without")
        p.until("paused", 60)
        t0 = time.monotonic()
        pid = int(p.last("pid").get("pid", 0))
        c.expect(p.last("alloc").get("rc") == "0", "without the interceptor 512 MiB: %s" % p.last("alloc"))
        listed = h.nvml.processes()
        c.fig("nvml_lists_our_pid", pid in listed)
        c.fig("nvml_pids", sorted(listed)[:16])
        c.fig("nvml_bytes_for_pid", listed.get(pid))
        while p.p.poll() is None and time.monotonic() - t0 < 20:
            time.sleep(0.01)
        gone = time.monotonic() - t0
        c.fig("stepd_status", p.status())
        killed = p.p.poll() == 128 + 9
        c.fig("killed", killed)
        c.fig("allocated_to_kill_ms", round(gone * 1000, 1) if killed else None)
        lines = [l for l in h.daemon_lines("audit") if job in l]
        c.fig("daemon_audit_lines", lines[-4:])
        if pid not in listed and not h.fake:
            c.fig("note", "NVML does not name this machine's pids: the audit cannot attribute GPU memory here")
        c.expect(killed, "the process holding 512 MiB in a %s job was not killed by the audit within 20 s (%s)" % (
            fmt_bytes(quota), p.status()))
