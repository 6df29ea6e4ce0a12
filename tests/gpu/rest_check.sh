#!/usr/bin/env bash
# run.sh --rest on fakecuda (make test-gpu): a run whose budget is spent
# before its first case marks every case cut; --rest on its file runs
# exactly those cases; --rest on a complete file runs none.
#
#   rest_check.sh BUNDLE LIBDIR OUTDIR
set -u
bundle=$1 lib=$2 out=$3
cases='^(host_memory_not_charged|context_over_quota_refused)$'
mkdir -p "$out" && rm -f "$out"/rest-*.jsonl
fail() { echo "rest_check: $*" >&2; exit 1; }
# count FILE FILTER: how many lines of FILE pass the Python FILTER on `r`
count() {
	python3 -c 'import json, sys
print(sum(1 for l in open(sys.argv[1]) if l.strip() and eval(sys.argv[2], {"r": json.loads(l)})))' "$1" "$2"
}

bash "$bundle/run.sh" --fakecuda "$lib" --cases "$cases" --budget 1 "$out/rest-cut.jsonl" 2>/dev/null
[ $? = 1 ] || fail "a run with a budget of 1 s did not fail"
n=$(count "$out/rest-cut.jsonl" 'r.get("cut") and r["verdict"] == "fail" and r["failures"][0].startswith("not run")')
[ "$n" = 2 ] || fail "a spent budget marked $n of 2 cases cut: $(cat "$out/rest-cut.jsonl")"

bash "$bundle/run.sh" --fakecuda "$lib" --cases "$cases" --rest "$out/rest-cut.jsonl" "$out/rest-rest.jsonl" 2>"$out/rest-rest.err" ||
	fail "--rest failed: $(tail -n 20 "$out/rest-rest.err")"
n=$(count "$out/rest-rest.jsonl" 'r["verdict"] == "pass" and not r.get("cut")')
[ "$n" = 2 ] || fail "--rest ran $n of the 2 cut cases to a pass: $(cat "$out/rest-rest.jsonl")"

bash "$bundle/run.sh" --fakecuda "$lib" --cases "$cases" --rest "$out/rest-rest.jsonl" "$out/rest-none.jsonl" 2>/dev/null ||
	fail "--rest after a complete run failed"
[ -f "$out/rest-none.jsonl" ] && [ ! -s "$out/rest-none.jsonl" ] || fail "--rest after a complete run ran cases again"

bash "$bundle/run.sh" --fakecuda "$lib" --rest "$out/rest-none.jsonl" "$out/rest-none.jsonl" 2>/dev/null
[ $? = 2 ] || fail "--rest naming the results file too was not refused"
echo "rest_check: a budget's cut cases marked, run by --rest, none run twice"
