"""Inside a session every memory query tells the same story: cuMemGetInfo_v2,
cuDeviceTotalMem_v2, NVML's nvmlDeviceGetMemoryInfo and _v2 (and
nvidia-smi, where the machine has it) give the quota as total and the
session's use as used; with a quota above the physical GPU they give the
GPU's own size, never more. NULL out-parameters are accepted: one NULL
fills the other, all-NULL calls answer what the driver itself answers."""

import os
import shutil
import subprocess

from harness import MiB, fmt_bytes

NAME = "queries_agree_and_accept_null"
PROVES = "cuMemGetInfo, cuDeviceTotalMem, NVML and nvidia-smi agree on the quota, never exceed the GPU, accept NULL"
ORDER = 30
TIMEOUT = 60

STEPS = ["dev:0", "alloc:256M", "meminfo", "meminfonull", "totalmem:0", "nvml", "querynull", "pause"]


def nvidia_smi():
    p = os.environ.get("NVIDIA_SMI") or shutil.which("nvidia-smi")
    return p if p and os.access(p, os.X_OK) else None


def smi_total_used(smi, env):
    out = subprocess.run([smi, "--query-gpu=memory.total,memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env, timeout=30)
    if out.returncode != 0:
        return None, "exit %d: %s" % (out.returncode, (out.stderr or out.stdout).strip()[:300])
    t, u = [int(x.strip()) for x in out.stdout.strip().split(",")[:2]]
    return (t, u), None


def answers(p):
    mi, mn, tm, nv, qn = (p.last(k) for k in ("meminfo", "meminfonull", "totalmem", "nvmldev", "querynull"))
    return {
        "cuMemGetInfo": (int(mi.get("free", -1)), int(mi.get("total", -1)), mi.get("rc")),
        "cuMemGetInfo_one_null": (int(mn.get("free", -1)), int(mn.get("total", -1)), mn.get("rc1"), mn.get("rc2")),
        "cuDeviceTotalMem": (int(tm.get("bytes", -1)), tm.get("rc")),
        "nvml": (int(nv.get("total1", -1)), int(nv.get("used1", -1)), int(nv.get("free1", -1)), nv.get("rc1")),
        "nvml_v2": (int(nv.get("total2", -1)), int(nv.get("used2", -1)), int(nv.get("free2", -1)), nv.get("rc2")),
        "null_rcs": {k: qn.get(k) for k in ("meminfo", "totalmem", "nvmlmem", "nvmlmem2")},
    }


def run(h, c):
    ctx = h.ctx_cost()
    phys = h.physical
    smi = nvidia_smi()
    c.fig("nvidia_smi", smi or "not found")
    p = h.probe(STEPS, h.env(), "bare")
    p.until("paused")
    p.cont()
    c.expect(p.wait() == 0, "without the interceptor: %s" % p.tail())
    bare = c.fig("without", answers(p))
    # The GPU's size as each interface gives it (CUDA's total and NVML's
    # may differ by what the driver reserves): nothing may report more.
    phys_of = {"cuMemGetInfo": bare["cuMemGetInfo"][1], "cuDeviceTotalMem": bare["cuDeviceTotalMem"][0],
               "nvml": bare["nvml"][0], "nvml_v2": bare["nvml_v2"][0]}
    c.fig("physical_by_interface", phys_of)
    c.expect(all(v > 0 for v in phys_of.values()) and phys_of["nvml"] == phys,
             "without the interceptor the queries failed or NVML disagrees with itself: %s" % bare)
    if smi:
        tu, err = smi_total_used(smi, h.env())
        c.fig("without_nvidia_smi_mib", tu or err)

    for label, quota in (("quota", ctx + 1024 * MiB), ("quota_above_gpu", phys + phys // 2)):
        want = {k: min(quota, v) for k, v in phys_of.items()}
        with h.session(quota) as s:
            p = h.probe(STEPS, s.env, "with-" + label)
            p.until("paused")
            used = s.used()
            a = answers(p)
            if smi:
                tu, err = smi_total_used(smi, s.env)
                a["nvidia_smi_mib"] = tu or err
                c.expect(tu is not None and abs(tu[0] - want["nvml"] // MiB) <= 1, "%s: nvidia-smi's total %s MiB, want %d" % (
                    label, tu[0] if tu else err, want["nvml"] // MiB))
            p.cont()
            c.expect(p.wait() == 0, "%s: %s" % (label, p.tail()))
            a["ledger_used"] = used
            c.fig(label, a)
            c.expect(a["cuMemGetInfo"][1:] == (want["cuMemGetInfo"], "0"), "%s: cuMemGetInfo (free, total, rc) %s, want total %s" % (
                label, a["cuMemGetInfo"], want["cuMemGetInfo"]))
            c.expect(a["cuDeviceTotalMem"] == (want["cuDeviceTotalMem"], "0"), "%s: cuDeviceTotalMem %s, want %s" % (
                label, a["cuDeviceTotalMem"], want["cuDeviceTotalMem"]))
            for k in ("nvml", "nvml_v2"):
                c.expect(a[k][0] == want[k] and a[k][1] == used and a[k][3] == "0",
                         "%s: %s (total, used, free, rc) %s, want total %s, used %s (the session's)" % (
                             label, k, a[k], want[k], used))
            if label == "quota":
                # the GPU has far more free than the quota: free is the quota's
                free_cuda, free_nvml = quota - used, want["nvml"] - used
                c.expect(a["cuMemGetInfo"][0] == free_cuda, "%s: cuMemGetInfo free %s, want %s" % (
                    label, a["cuMemGetInfo"][0], free_cuda))
                for k in ("nvml", "nvml_v2"):
                    c.expect(a[k][2] == free_nvml, "%s: %s free %s, want %s" % (label, k, a[k][2], free_nvml))
            # one NULL: the other filled, with the driver's return codes
            one = a["cuMemGetInfo"][:2] + bare["cuMemGetInfo_one_null"][2:]
            c.expect(a["cuMemGetInfo_one_null"] == one, "%s: cuMemGetInfo with one NULL (free, total, rc, rc): %s, want %s" % (
                label, a["cuMemGetInfo_one_null"], one))
            c.expect(a["null_rcs"] == bare["null_rcs"], "%s: all-NULL queries answer %s, the driver %s" % (
                label, a["null_rcs"], bare["null_rcs"]))
            for k in ("cuMemGetInfo", "cuDeviceTotalMem", "nvml", "nvml_v2"):
                got = a[k][1] if k == "cuMemGetInfo" else a[k][0]
                c.expect(got <= phys_of[k], "%s: %s reports %s, more than the GPU's %s" % (
                    label, k, fmt_bytes(got), fmt_bytes(phys_of[k])))
