"""Runs the real-GPU suite's cases and writes one JSON line per case.

Started by run.sh, which has started gpusliced and exported
GPUSLICE_ADMIN_SOCK and GPUSLICE_IPC_SOCK.

    runner.py --bundle DIR --tmp DIR --out FILE --daemon-log FILE
              [--fakecuda LIBDIR] [--cases REGEX] [--budget SECONDS]
              [--rest EARLIER.jsonl]

Each line: name, proves, verdict (pass, fail or skip), reason (skip) or
failures (fail), figures, seconds, cut (true: not run, or stopped early,
because the budget was spent), versions (GPU, driver, CUDA, gpuslice,
Python, frameworks), run (when and where). With --rest, only the cases an
earlier run's file has no line for or marked cut are run (its lines and
these make one page: make real-gpu-report RESULTS="EARLIER REST"). Exit
status 1 when a case failed, 0 otherwise.
"""

import argparse
import datetime
import glob
import hashlib
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout()


# Distributions whose versions the report names (installed ones only).
FRAMEWORKS = re.compile(r"^(torch|jax|jaxlib|jax-cuda\d+-(plugin|pjrt)|cupy(-cuda\d+x)?|triton|"
                        r"nvidia-(nccl|cudnn|cuda-runtime|cublas|cuda-nvrtc)-cu\d+)$")


def framework_versions():
    out = {}
    try:
        from importlib import metadata
    except ImportError:
        return out
    for d in metadata.distributions():
        name = (d.metadata["Name"] or "").lower().replace("_", "-")
        if FRAMEWORKS.match(name):
            out[name] = d.version
    return dict(sorted(out.items()))


def bundle_digest(bundle):
    """What identifies the build a run tested: a SHA-256 over the bundle's
    files (binaries, libraries, probes, cases, runner), their paths
    included, so two runs' lines are merged only when they tested the
    same files (make real-gpu-report)."""
    d = hashlib.sha256()
    for root, dirs, files in os.walk(bundle):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, bundle)
            if rel.endswith((".jsonl", ".log")) or not os.path.isfile(path):
                continue  # results a run left in the bundle are not the build
            d.update(rel.encode() + b"\0")
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    d.update(chunk)
            d.update(b"\0")
    return "sha256:" + d.hexdigest()[:16]


def versions(h, args):
    v = {
        "gpu": h.nvml.name(),
        "gpu_uuid": h.nvml.uuid(),
        "gpu_memory_bytes": h.physical,
        "driver": h.nvml.driver(),
        "cuda_driver": h.nvml.cuda_driver(),
        "fakecuda": h.fake,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "frameworks": framework_versions(),
        "bundle": bundle_digest(args.bundle),
    }
    try:
        v["gpuslice"] = subprocess.run([h.gpuslice, "--version"], stdout=subprocess.PIPE,
                                       universal_newlines=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        v["gpuslice"] = "unknown (%s)" % e
    try:
        v["context_cost_daemon_bytes"] = h.daemon_ctx_cost()
    except harness.CaseError as e:
        v["context_cost_daemon_bytes"] = None
        print("runner: %s" % e, file=sys.stderr)
    try:
        v["context_cost_nvml_bytes"] = h.ctx_cost()
        v["nvml_names_our_pids"] = h.nvml_names_pids
    except harness.CaseError as e:
        v["context_cost_nvml_bytes"] = None
        print("runner: measuring a context: %s" % e, file=sys.stderr)
    return v


def load_cases(bundle, pattern):
    cases = []
    for path in sorted(glob.glob(os.path.join(bundle, "cases", "*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if pattern and not re.search(pattern, name):
            continue
        spec = importlib.util.spec_from_file_location("case_" + name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.FILE = path
        cases.append(mod)
    # Driver-level cases first (fast, and what everything else stands on),
    # then frameworks, then the costs.
    cases.sort(key=lambda m: (getattr(m, "ORDER", 50), m.NAME))
    return cases


def done_cases(path):
    """The cases an earlier run's file ran to the end: every line's name
    but those marked cut (not run, or stopped, for the budget)."""
    done = set()
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                name = rec["name"]
            except (ValueError, KeyError, TypeError):
                raise ValueError("line %d is not a case's result" % n)
            if not rec.get("cut"):
                done.add(name)
    return done


def run_case(h, mod, budget_left):
    c = harness.Checks()
    rec = {"name": mod.NAME, "proves": mod.PROVES}
    own = getattr(mod, "TIMEOUT", 90)
    limit = int(min(own, max(budget_left, 1)))
    t0 = time.monotonic()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    try:
        mod.run(h, c)
        rec["verdict"] = "fail" if c.failures else "pass"
    except harness.Skip as e:
        rec["verdict"], rec["reason"] = "skip", str(e)
        if h.fake and not isinstance(e, harness.FrameworkSkip):
            # fakecuda runs every case that needs no framework
            c.failures.append("skipped on fakecuda, and not for a missing framework: %s" % e)
    except CaseTimeout:
        rec["verdict"] = "fail"
        if limit < own:
            rec["cut"] = True
            c.failures.append("did not finish within %d s, what the suite's budget had left (its own limit: %d s)"
                              % (limit, own))
        else:
            c.failures.append("did not finish within %d s" % limit)
    except harness.CaseError as e:
        rec["verdict"] = "fail"
        c.failures.append(str(e))
    except Exception:
        rec["verdict"] = "fail"
        c.failures.append(traceback.format_exc()[-3000:])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        try:
            h.cleanup()
        except Exception:
            c.failures.append("cleanup: " + traceback.format_exc()[-500:])
            rec["verdict"] = "fail"
    if c.failures:
        rec["verdict"] = "fail"
        rec["failures"] = c.failures
    rec["figures"] = c.figures
    rec["seconds"] = round(time.monotonic() - t0, 2)
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--daemon-log", required=True)
    ap.add_argument("--fakecuda", default="")
    ap.add_argument("--cases", default="")
    ap.add_argument("--budget", type=float, default=345.0)
    ap.add_argument("--rest", default="")
    args = ap.parse_args()
    done = set()
    if args.rest:
        try:
            done = done_cases(args.rest)
        except (OSError, ValueError) as e:
            print("runner: --rest %s: %s" % (args.rest, e), file=sys.stderr)
            return 2

    t_start = time.monotonic()
    h = harness.Harness(args.bundle, args.tmp, args.fakecuda, args.daemon_log)
    ver = versions(h, args)
    run = {"started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "host": platform.node(), "uid": os.getuid()}
    print("runner: %s, driver %s, CUDA %s%s; a context costs %s (NVML), %s (gpusliced's probe)" % (
        ver["gpu"], ver["driver"], ver["cuda_driver"], " (fakecuda)" if h.fake else "",
        harness.fmt_bytes(ver.get("context_cost_nvml_bytes")),
        harness.fmt_bytes(ver.get("context_cost_daemon_bytes"))), file=sys.stderr)

    cases = [m for m in load_cases(args.bundle, args.cases) if m.NAME not in done]
    if args.rest:
        print("runner: --rest: %d case(s) that %s did not run to the end: %s" % (
            len(cases), args.rest, " ".join(m.NAME for m in cases) or "none"), file=sys.stderr)
    failed = 0
    counts = {"pass": 0, "fail": 0, "skip": 0}
    with open(args.out, "w") as out:
        for mod in cases:
            left = args.budget - (time.monotonic() - t_start)
            if left < 5:
                rec = {"name": mod.NAME, "proves": mod.PROVES, "verdict": "fail",
                       "failures": ["not run: the suite's budget of %d s was spent" % args.budget],
                       "figures": {}, "seconds": 0, "cut": True}
            else:
                rec = run_case(h, mod, left)
            rec["versions"] = ver
            rec["run"] = run
            out.write(json.dumps(rec, sort_keys=True) + "\n")
            out.flush()
            counts[rec["verdict"]] += 1
            line = "%-4s %-44s %6.1fs" % (rec["verdict"].upper(), rec["name"], rec.get("seconds", 0))
            if rec["verdict"] == "skip":
                line += "  (%s)" % rec["reason"]
            print(line, file=sys.stderr)
            for f in rec.get("failures", []):
                print("       " + f.replace("\n", "\n       "), file=sys.stderr)
            failed += rec["verdict"] == "fail"
    print("runner: %d pass, %d fail, %d skip in %.1f s; results in %s" % (
        counts["pass"], counts["fail"], counts["skip"], time.monotonic() - t_start, args.out), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
