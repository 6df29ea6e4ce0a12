"""The real-GPU suite's harness: what every case in cases/ is given.

One Harness per run (runner.py makes it). It knows the bundle (gpuslice
CLI, libgpuslice.so, the probes), the gpusliced that run.sh started on
private sockets, and the driver's own figures: NVML, read in this process,
which never loads the interceptor and never joins a session (root, outside
every session: the ground truth the cases compare with).

A case is a module with NAME, PROVES and run(h, c): h is the Harness, c a
Checks that collects figures and failed expectations; raising Skip(reason)
reports the case as skipped. Python framework cases run their workload in
a worker process (the case's own file, started through h.worker) once with
the interceptor in a session and once without; workers talk to the case
through JSON lines on stdout and wait for a line on stdin at each sync().

Only the standard library is used: this runs on the GPU machine's own
Python (3.8 or later) next to whatever frameworks it has.
"""

import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

MiB = 1 << 20
GiB = 1 << 30
OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY
# how long a reading waits for gpusliced to charge the driver's own memory
# (Harness.settled): two audit passes and their confirming reads
SETTLE_S = 1.2


class Skip(Exception):
    """The case cannot run here; the message says why."""


class FrameworkSkip(Skip):
    """Skip: the framework the case needs is missing here, or lacks what it
    tests (the only skip a fakecuda run allows)."""


class CaseError(Exception):
    """The case could not go on (a process died, a line never came)."""


def fmt_bytes(n):
    if n is None:
        return "n/a"
    for unit, div in (("GiB", GiB), ("MiB", MiB)):
        if abs(n) >= div:
            return "%.1f %s" % (n / div, unit)
    return "%d B" % n


# ---------------------------------------------------------------- worker side

def emit(event, **fields):
    """Worker: print one JSON line."""
    fields["event"] = event
    sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def sync(at, **fields):
    """Worker: report, then wait until the case has read the driver's figures."""
    emit("sync", at=at, **fields)
    sys.stdin.readline()


def worker_main(fn):
    """Worker: run fn(args) and report its dict as the 'result' event; an
    exception is reported as the result's 'error' (and exit status 1)."""
    import traceback
    try:
        res = fn(worker_args())
        emit("result", **(res or {}))
    except BaseException as e:  # report everything, KeyboardInterrupt included
        emit("result", error="%s: %s" % (type(e).__name__, str(e)[:1500]),
             traceback=traceback.format_exc()[-3000:])
        sys.exit(1)


def worker_args():
    """Worker: the arguments after 'worker' (mode first)."""
    i = sys.argv.index("worker")
    return sys.argv[i + 1:]


# ---------------------------------------------------------------- NVML

class _ProcInfo(ctypes.Structure):
    # nvmlProcessInfo_t, the layout of nvmlDeviceGetComputeRunningProcesses_v3
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1


class _UtilSample(ctypes.Structure):
    # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Nvml:
    """The driver's figures through NVML (libnvidia-ml.so.1), device 0."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        rc = self.lib.nvmlInit_v2()
        if rc != 0:
            raise RuntimeError("nvmlInit_v2: %d" % rc)
        self.dev = ctypes.c_void_p()
        rc = self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.dev))
        if rc != 0:
            raise RuntimeError("nvmlDeviceGetHandleByIndex_v2(0): %d" % rc)

    def _str(self, fn, *args):
        buf = ctypes.create_string_buffer(256)
        rc = fn(*(args + (buf, 256)))
        return buf.value.decode(errors="replace") if rc == 0 else None

    def name(self):
        return self._str(self.lib.nvmlDeviceGetName, self.dev)

    def uuid(self):
        return self._str(self.lib.nvmlDeviceGetUUID, self.dev)

    def driver(self):
        return self._str(self.lib.nvmlSystemGetDriverVersion)

    def cuda_driver(self):
        v = ctypes.c_int()
        if self.lib.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(v)) != 0:
            return None
        return "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)

    def memory(self):
        m = _Memory()
        rc = self.lib.nvmlDeviceGetMemoryInfo(self.dev, ctypes.byref(m))
        if rc != 0:
            raise RuntimeError("nvmlDeviceGetMemoryInfo: %d" % rc)
        return {"total": m.total, "free": m.free, "used": m.used}

    def processes(self):
        """{pid: bytes or None (NVML_VALUE_NOT_AVAILABLE)} of device 0."""
        n = 256
        while True:
            arr = (_ProcInfo * n)()
            cnt = ctypes.c_uint(n)
            rc = self.lib.nvmlDeviceGetComputeRunningProcesses_v3(self.dev, ctypes.byref(cnt), arr)
            if rc == 7 and n < 65536:  # NVML_ERROR_INSUFFICIENT_SIZE
                n *= 4
                continue
            if rc != 0:
                raise RuntimeError("nvmlDeviceGetComputeRunningProcesses_v3: %d" % rc)
            out = {}
            for i in range(cnt.value):
                used = arr[i].usedGpuMemory
                out[arr[i].pid] = None if used == NVML_VALUE_NOT_AVAILABLE else used
            return out

    def proc(self, pid):
        """What NVML says pid holds on device 0: bytes, or None when NVML does
        not list the pid (another pid namespace, or none) or gives no figure."""
        return self.processes().get(pid)

    def util_size_query(self, since=0):
        """nvmlDeviceGetProcessUtilization asked with no buffer: (rc, count)."""
        n = ctypes.c_uint(0)
        rc = self.lib.nvmlDeviceGetProcessUtilization(self.dev, None, ctypes.byref(n), ctypes.c_ulonglong(since))
        return rc, n.value

    def util_samples(self, since):
        """The per-process utilisation samples newer than `since` (us):
        [(pid, timestamp us, smUtil)], the buffer grown while NVML answers
        INSUFFICIENT_SIZE; [] when there is none (NOT_FOUND)."""
        n = 256
        while True:
            arr = (_UtilSample * n)()
            cnt = ctypes.c_uint(n)
            rc = self.lib.nvmlDeviceGetProcessUtilization(self.dev, arr, ctypes.byref(cnt), ctypes.c_ulonglong(since))
            if rc == 7 and n < 65536:  # NVML_ERROR_INSUFFICIENT_SIZE
                n = max(4 * n, cnt.value)
                continue
            if rc == 6:  # NVML_ERROR_NOT_FOUND: no sample since
                return []
            if rc != 0:
                raise RuntimeError("nvmlDeviceGetProcessUtilization: %d" % rc)
            return [(arr[i].pid, arr[i].timeStamp, arr[i].smUtil) for i in range(cnt.value)]


class UtilWatch:
    """NVML's per-process utilisation samples while it runs (a thread
    reading every 0.25 s what is new, as gpusliced's controller reads), and
    what they show: per pid the samples, the median interval between them
    (the driver's sample period) and the mean smUtil."""

    def __init__(self, nvml):
        self.nvml, self.samples, self.error = nvml, [], None
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join(5)
        return False

    def _run(self):
        # from the newest sample there is now (not from a clock of ours: the
        # driver stamps the samples with its own)
        try:
            seen = max([0] + [ts for _, ts, _ in self.nvml.util_samples(0)])
        except Exception as e:
            self.error = str(e)
            return
        while not self.stop.wait(0.25):
            try:
                got = self.nvml.util_samples(seen)
            except Exception as e:  # reported, not raised: a figure, not a verdict
                self.error = str(e)
                return
            self.samples.extend(got)
            seen = max([seen] + [ts for _, ts, _ in got])

    def summary(self, pids):
        out = {}
        for pid in pids:
            ts = sorted(t for p, t, _ in self.samples if p == pid)
            sm = [u for p, _, u in self.samples if p == pid]
            gaps = sorted((b - a) / 1000.0 for a, b in zip(ts, ts[1:]) if b > a)
            out[str(pid)] = {"samples": len(ts),
                             "interval_ms_median": gaps[len(gaps) // 2] if gaps else None,
                             "interval_ms_min": gaps[0] if gaps else None,
                             "sm_util_mean": round(sum(sm) / len(sm), 1) if sm else None}
        if self.error:
            out["error"] = self.error
        return out


# ---------------------------------------------------------------- processes

def parse_line(line):
    """A probe's 'head k=v k=v' line, or a worker's JSON line, as a dict
    whose '_' is the head (JSON: its event)."""
    line = line.rstrip("\n")
    if line.startswith("{"):
        try:
            d = json.loads(line)
            d["_"] = d.get("event", "")
            return d
        except ValueError:
            pass
    parts = line.split()
    d = {"_": parts[0] if parts else ""}
    # 'head k=v ...' (gs_probe) or 'event=head k=v ...' (the examples)
    for p in parts[1:] if parts and "=" not in parts[0] else parts:
        k, eq, v = p.partition("=")
        if eq:
            d[k] = v.strip('"')
    if "event" in d and "=" in d["_"]:
        d["_"] = d["event"]
    return d


class Proc:
    """A child process with its stdout read line by line in the background."""

    def __init__(self, h, argv, env, name, executable=None, group=False):
        self.h, self.argv, self.name, self.group = h, argv, name, group
        self.errpath = os.path.join(h.tmp, "%s.%d.stderr" % (name, len(h.procs)))
        self.errf = open(self.errpath, "w+")
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.errf, universal_newlines=True, bufsize=1,
                                  executable=executable, start_new_session=group)
        self.pid = self.p.pid
        self.lines = []
        self.q = queue.Queue()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        h.procs.append(self)

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))
            self.q.put(parse_line(line))
        self.q.put(None)

    def stderr(self, limit=2000):
        try:
            self.errf.flush()
            with open(self.errpath, errors="replace") as f:
                s = f.read()
        except OSError:
            return ""
        return s[-limit:]

    def tail(self):
        out = "\n".join(self.lines[-15:])
        return "%s: stdout: %s | stderr: %s" % (self.name, out[-1500:], self.stderr(1500))

    def until(self, head, timeout=60, at=None):
        """Wait for the next line whose head is `head` (and, for worker syncs,
        whose 'at' is `at`); returns it parsed. Lines before it are kept in
        self.lines. Raises CaseError if the process ends or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CaseError("%s: no '%s' line within %ds; %s" % (self.name, at or head, timeout, self.tail()))
            try:
                d = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if d is None:
                self.p.wait()
                raise CaseError("%s ended (%s) before '%s'; %s" % (self.name, self.status(), at or head, self.tail()))
            if d["_"] == head and (at is None or d.get("at") == at):
                return d
            if d["_"] == "error":
                raise CaseError("%s: %s" % (self.name, self.tail()))

    def cont(self):
        try:
            self.p.stdin.write("\n")
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def wait(self, timeout=60):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise CaseError("%s did not exit within %ds; %s" % (self.name, timeout, self.tail()))
        self.t.join(5)
        return rc

    def status(self):
        rc = self.p.poll()
        if rc is None:
            return "running"
        if rc < 0:
            return "killed by signal %d" % -rc
        return "exit %d" % rc

    def parsed(self, head=None):
        out = [parse_line(l) for l in self.lines]
        return [d for d in out if head is None or d["_"] == head]

    def last(self, head, upto=None):
        """The last line with head `head` among the first `upto` lines (all
        when None); {} when there is none."""
        lines = self.lines if upto is None else self.lines[:upto]
        for l in reversed(lines):
            d = parse_line(l)
            if d["_"] == head:
                return d
        return {}

    def kill(self, sig=signal.SIGKILL):
        """Signal the process (its whole process group when it leads one:
        a stand-in slurmstepd and its task)."""
        try:
            if self.group:
                os.killpg(self.pid, sig)
            elif self.p.poll() is None:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------- sessions

class Session:
    """A gpuslice session (as a Slurm job's Prolog would make), released at exit."""

    def __init__(self, h, sid, quota, compute=None):
        self.h, self.id, self.quota = h, sid, quota
        self.report = None
        share = ["--gpu-compute", str(compute)] if compute is not None else []
        h.cli("allocate", sid, "--gpu-mem", "%dB" % quota, "--uid", str(os.getuid()), "--json", *share)
        self.env = h.env({"LD_PRELOAD": h.preload, "GPUSLICE_SESSION": sid,
                          "GPUSLICE_IPC_SOCK": h.ipc})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def release(self):
        if self.report is None:
            try:
                self.report = self.h.cli("release", self.id, "--json")
            except CaseError:
                self.report = {}
        return self.report

    def status(self):
        return self.h.cli("status", self.id, "--json")

    def gpu(self):
        return self.status()["gpus"][0]

    def used(self):
        """Bytes the ledger holds for the session on the GPU (the interceptor's charge)."""
        return int(self.gpu()["used_bytes"])

    def wait_used(self, pred, timeout=10):
        """Poll used until pred(used) holds; returns (used, seconds) or (last, None)."""
        t0 = time.monotonic()
        u = self.used()
        while not pred(u):
            if time.monotonic() - t0 > timeout:
                return u, None
            time.sleep(0.005)
            u = self.used()
        return u, time.monotonic() - t0


# ---------------------------------------------------------------- the harness

class Checks:
    """Figures and failed expectations of one case."""

    def __init__(self):
        self.figures = {}
        self.failures = []

    def fig(self, key, value):
        self.figures[key] = value
        return value

    def expect(self, cond, msg):
        if not cond:
            self.failures.append(msg)
        return bool(cond)

    def near(self, got, want, tol, what):
        """got within tol bytes of want (a None got, a figure NVML did not
        give, fails with that said)."""
        if got is None:
            self.failures.append("%s: no figure (want %s)" % (what, fmt_bytes(want)))
            return False
        return self.expect(abs(got - want) <= tol, "%s: %s, want %s (within %s)" % (
            what, fmt_bytes(got), fmt_bytes(want), fmt_bytes(tol)))


class Harness:
    def __init__(self, bundle, tmp, fakecuda_lib, daemon_log):
        self.bundle = bundle
        self.tmp = tmp
        self.fake = bool(fakecuda_lib)
        self.daemon_log = daemon_log
        self.preload = os.path.join(bundle, "lib", "libgpuslice.so")
        self.probes = os.path.join(bundle, "probes")
        self.gpuslice = os.path.join(bundle, "bin", "gpuslice")
        self.admin = os.environ["GPUSLICE_ADMIN_SOCK"]
        self.ipc = os.environ["GPUSLICE_IPC_SOCK"]
        self.python = sys.executable
        self.procs = []
        self.nsess = 0
        self.nvml = Nvml()
        self._ctx = None
        self.nvml_names_pids = None
        self.physical = self.nvml.memory()["total"]

    # -- environments
    def env(self, extra=None):
        """The environment of a process outside every session: no LD_PRELOAD,
        no GPUSLICE_*; FAKECUDA_* and LD_LIBRARY_PATH stay (fakecuda)."""
        e = {k: v for k, v in os.environ.items()
             if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
        e["PYTHONUNBUFFERED"] = "1"
        e["PYTHONDONTWRITEBYTECODE"] = "1"
        if extra:
            e.update(extra)
        return e

    # -- the daemon
    def cli(self, *args):
        argv = [self.gpuslice, "--admin-socket", self.admin, "--ipc-socket", self.ipc] + list(args)
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=30, env=self.env())
        if p.returncode != 0:
            raise CaseError("gpuslice %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr.strip()))
        return json.loads(p.stdout) if "--json" in args else p.stdout

    def session(self, quota, sid=None, compute=None):
        """A session of quota bytes; compute: its GPU time share (a percent,
        'proportional'), None for none."""
        self.nsess += 1
        return Session(self, sid or "gpu-%d-%d" % (os.getpid(), self.nsess), int(quota), compute)

    def daemon_lines(self, needle):
        try:
            with open(self.daemon_log, errors="replace") as f:
                return [l.rstrip("\n") for l in f if needle in l]
        except OSError:
            return []

    def ctx_cost(self):
        """What one CUDA context costs on device 0, by the driver's own
        per-process figure (NVML), measured once with an unpreloaded probe;
        the figure the cases size their quotas with."""
        if self._ctx is None:
            p = self.probe(["dev:0", "pause"], self.env(), "ctx-measure")
            p.until("paused", 60)
            got = self.nvml.proc(p.pid)
            dev_used = self.nvml.memory()["used"]
            p.cont()
            p.wait()
            self.nvml_names_pids = got is not None
            if got is None:
                # NVML does not name this process: the device's figure, less
                # what it held with no process of ours on it, stands in.
                after = self.nvml.memory()["used"]
                got = max(dev_used - after, 0)
            self._ctx = got
        return self._ctx

    def daemon_ctx_cost(self):
        gpus = self.cli("gpus", "--json")
        return int(gpus[0].get("context_cost_bytes") or 0)

    # -- processes
    def probe(self, steps, env, name="gs_probe", prog="gs_probe"):
        return Proc(self, [os.path.join(self.probes, prog)] + list(steps), env, name)

    def run_probe(self, steps, env, name="gs_probe", prog="gs_probe", timeout=60):
        """Run a probe to its end; returns (rc, parsed lines)."""
        p = self.probe(steps, env, name, prog)
        rc = p.wait(timeout)
        return rc, p, p.parsed()

    def in_job(self, job, argv, env, name):
        """Run argv as a task of Slurm job `job` as gpusliced tells jobs
        apart without the interceptor: below a root process whose executable
        is named slurmstepd and whose title is 'slurmstepd: [job.0]' (a
        copy of bash). The Proc is the stand-in slurmstepd; the task is its
        child (ask it for its pid)."""
        stepd = os.path.join(self.tmp, "slurmstepd")
        if not os.path.exists(stepd):
            import shutil
            shutil.copy2("/bin/bash", stepd)
        return Proc(self, ["slurmstepd: [%s.0]" % job, "-c", '"$@" <&0 & wait $!', "bash"] + list(argv),
                    env, name, executable=stepd, group=True)

    def truth(self, pid):
        """The driver's figure for pid: NVML's per-process bytes where NVML
        names our pids, else the device's used bytes (only differences
        between two readings mean anything then)."""
        if self.nvml_names_pids is False:
            return self.nvml.memory()["used"]
        return self.nvml.proc(pid)

    def truth_source(self):
        return "device used (NVML does not name our pids)" if self.nvml_names_pids is False \
            else "NVML per-process"

    def snapshots(self, steps, env, name, session=None, timeout=60, prog="gs_probe"):
        """Run a probe whose steps include 'pause'; at each pause take the
        driver's figure for it and the session's charge. Returns (exit
        status, Proc, snapshots); a snapshot is {'truth', 'used', 'n'}, n
        the number of output lines so far (for Proc.last)."""
        p = self.probe(steps, env, name, prog)
        snaps = []
        for _ in range(list(steps).count("pause")):
            p.until("paused", timeout)
            truth, used = self.settled(p.pid, session)
            snaps.append({"truth": truth, "used": used, "n": len(p.lines)})
            p.cont()
        return p.wait(timeout), p, snaps

    def settled(self, pid, session):
        """The driver's figure for pid and the session's charge, once
        gpusliced has read the driver: it charges what the driver holds
        beyond the hooks' charges (modules, library handles) at its audit
        passes (docs/ledger.md "Driver memory"), every 500 ms here. While
        the driver's figure is above the charge, wait for up to two passes
        (the process is paused: its figure holds still)."""
        truth = self.truth(pid)
        if session is None:
            return truth, None
        used = session.used()
        deadline = time.monotonic() + SETTLE_S
        while truth is not None and used < truth and time.monotonic() < deadline:
            time.sleep(0.1)
            truth, used = self.truth(pid), session.used()
        return truth, used

    def worker(self, case_file, args, env, name="worker"):
        return Proc(self, [self.python, case_file, "worker"] + list(args), env, name)

    def converse(self, p, session=None, timeout=120):
        """Follow a worker to its end: at each sync take the driver's figure
        for it and the session's charge, then let it go on. Returns
        {'syncs': {at: {'truth', 'used', **fields}}, 'result': the last
        'result' event (or None), 'events': the other JSON events, 'rc',
        'status', 'tail', 'stderr'}."""
        out = {"syncs": {}, "result": None, "events": []}
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                p.kill()
                out["timeout"] = timeout
                break
            try:
                d = p.q.get(timeout=min(left, 1))
            except queue.Empty:
                continue
            if d is None:
                break
            if "event" not in d:
                continue  # a framework's own printing
            if d["_"] == "sync":
                snap = {k: v for k, v in d.items() if k not in ("_", "event")}
                snap["truth"], snap["used"] = self.settled(p.pid, session)
                if isinstance(d.get("children"), list):
                    snap["truth_children"] = {str(x): self.truth(int(x)) for x in d["children"]}
                if session:
                    st = session.status()
                    snap["session_pids"] = sorted(int(x["pid"]) for x in st.get("processes") or [])
                out["syncs"][d.get("at")] = snap
                p.cont()
            elif d["_"] == "result":
                out["result"] = {k: v for k, v in d.items() if k not in ("_", "event")}
            else:
                out["events"].append(d)
        out["rc"] = p.wait(30)
        out["status"] = p.status()
        out["tail"] = p.tail()
        out["stderr"] = p.stderr(1 << 20)
        return out

    def framework(self, c, case_file, args, quota, extra_env=None, timeout=120, sides=("without", "with")):
        """Run a case's worker without the interceptor and with it, in a
        session of `quota` bytes. Returns {side: converse(...)}, and under
        'with' also 'report' (the session's release report) and
        'audit' (the daemon's audit lines about the session)."""
        out = {}
        for side in sides:
            if side == "without":
                p = self.worker(case_file, args, self.env(extra_env), "without")
                out[side] = self.converse(p, None, timeout)
            else:
                with self.session(quota) as s:
                    env = dict(s.env)
                    env.update(extra_env or {})
                    p = self.worker(case_file, args, env, "with")
                    out[side] = self.converse(p, s, timeout)
                    s.release()
                    out[side]["report"] = s.report
                    out[side]["audit"] = [l for l in self.daemon_lines("audit") if s.id in l][-4:]
        return out

    def worker_ok(self, c, run, side):
        """Expect a worker run to have ended well; returns its result."""
        r = run.get("result") or {}
        why = r.get("error") or run.get("tail", "")
        if run.get("audit"):
            why += "; gpusliced's audit: %s" % run["audit"]
        if run.get("timeout"):
            why = "no end within %d s; %s" % (run["timeout"], why)
        c.expect(run.get("rc") == 0 and run.get("result") is not None and "error" not in r,
                 "%s: the worker ended %s: %s" % (side, run.get("status"), why))
        return r

    @staticmethod
    def unsupported(out):
        """The error a worker met without the interceptor, or None: a mode
        the framework does not offer on this machine proves nothing either
        way and is reported as such, not held against gpuslice."""
        r = out["without"].get("result") or {}
        if out["without"].get("rc") == 0 and "error" not in r:
            return None
        return r.get("error") or out["without"].get("status")

    def cleanup(self):
        for p in self.procs:
            p.kill()
            try:
                p.p.wait(5)
            except subprocess.TimeoutExpired:
                pass
            p.errf.close()
        self.procs = []

    # -- helpers for cases
    def need_module(self, *names):
        """Skip unless every Python module named is importable here."""
        import importlib.util
        for n in names:
            if importlib.util.find_spec(n) is None:
                raise FrameworkSkip("%s not installed" % n)
