# Generates fakecuda's driver surface from entry-points.tsv (run by make; a
# base name seen before is skipped):
#   OUT/exports.txt   every exported symbol, one per line (sorted by make)
#   OUT/libcuda.map   linker version script exporting exactly those names
#   OUT/stubs.c       a weak CUDA_ERROR_NOT_SUPPORTED definition of each name;
#                     the modelled functions in native/fakecuda override them
#   OUT/procaddr.c    the cuGetProcAddress table: per base name, each version
#                     with the symbol it resolves to and its per-thread symbol,
#                     and the private entry point of each (procaddr_priv.h)
# Exported names: every default_symbol, every ptds_symbol that is not '-',
# and the legacy names of the header notes (the base_name of each renamed row
# plus the extra names listed in the note on __CUDA_API_VERSION_INTERNAL), and
# the names of the note on names the 535 driver exports that no header declares
# (exported as NOT_SUPPORTED stubs, no cuGetProcAddress entry).
# Version i (1-based, ascending, per-thread-only 7000 excluded) of base B
# resolves to B for i = 1 and B_v<i> otherwise; the one exception is
# cuGraphInstantiate at 11040, which resolves to cuGraphInstantiateWithFlags.
# Usage: awk -v out=DIR -f gen-entry-points.awk entry-points.tsv
BEGIN { FS = "\t"; nrows = 0; nexp = 0; innote = 0 }

# The private entry point of exported symbol s (procaddr_priv.h): declared
# before the first table that names it.
function priv(s) {
	if (!(s in privno)) {
		privno[s] = ++npriv
		printf "FC_PA_PRIVATE(%d, %s)\n", npriv, s > paf
	}
	return "(void *)fc_pa_priv_" privno[s]
}

function export_name(s) {
	if (s == "-" || s == "") return
	if (!(s in exported)) { exported[s] = 1; expl[++nexp] = s }
}

/^#/ {
	# the note listing exported names that have no row of their own
	if ($0 ~ /Exported names declared only in/) innote = 1
	else if (innote && $0 ~ /^#   - /) innote = 0
	if ($0 ~ /declared in no header/) { innohdr = 1; next }
	else if (innohdr && $0 !~ /^#     /) innohdr = 0
	if (innohdr) {
		line = $0
		while (match(line, /cu[A-Za-z][A-Za-z0-9_]*/)) {
			extra[++nextra] = substr(line, RSTART, RLENGTH)
			line = substr(line, RSTART + RLENGTH)
		}
	}
	if (innote) {
		line = $0
		sub(/^#[^:]*\)\:/, "", line)          # drop the note's lead-in up to "...):"
		while (match(line, /cu[A-Z][A-Za-z0-9_]*/)) {
			extra[++nextra] = substr(line, RSTART, RLENGTH)
			line = substr(line, RSTART + RLENGTH)
		}
	}
	next
}
$1 == "base_name" { next }
NF >= 4 {
	if ($1 in seenbase) next
	seenbase[$1] = 1
	nrows++
	base[nrows] = $1; vers[nrows] = $2; def[nrows] = $3; pt[nrows] = $4
	export_name($3); export_name($4)
	if ($3 != $1) legacy[++nlegacy] = $1
}
END {
	if (nrows == 0) { print "gen-entry-points: no rows" > "/dev/stderr"; exit 1 }
	for (i = 1; i <= nlegacy; i++) export_name(legacy[i])
	for (i = 1; i <= nextra; i++) export_name(extra[i])

	exf = out "/exports.txt"; mapf = out "/libcuda.map"; stf = out "/stubs.c"; paf = out "/procaddr.c"
	printf "" > exf
	for (i = 1; i <= nexp; i++) print expl[i] > exf

	print "/* generated from native/fakecuda/entry-points.tsv by gen-entry-points.awk; do not edit */" > mapf
	print "{\n  global:" > mapf
	for (i = 1; i <= nexp; i++) printf "    %s;\n", expl[i] > mapf
	print "  local: *;\n};" > mapf

	print "/* generated from native/fakecuda/entry-points.tsv by gen-entry-points.awk; do not edit */" > stf
	print "/* Entry points fakecuda does not model: present, and answer CUDA_ERROR_NOT_SUPPORTED. */" > stf
	print "#define FC_STUB(name) __attribute__((weak, visibility(\"default\"))) int name(void); \\" > stf
	print "\t__attribute__((weak, visibility(\"default\"))) int name(void) { return 801; }" > stf
	for (i = 1; i <= nexp; i++) printf "FC_STUB(%s)\n", expl[i] > stf

	print "/* generated from native/fakecuda/entry-points.tsv by gen-entry-points.awk; do not edit */" > paf
	print "#include \"procaddr.h\"" > paf
	for (i = 1; i <= nexp; i++) printf "extern void %s(void);\n", expl[i] > paf
	print "#include \"procaddr_priv.h\"" > paf
	bad = 0
	for (r = 1; r <= nrows; r++) {
		b = base[r]; p = pt[r]; suffix = ""; ptmin = 0
		if (p != "-") { suffix = p; sub(/.*_/, "_", suffix) }
		n = 0
		if (vers[r] != "-") {
			nv = split(vers[r], vv, ",")
			for (k = 1; k <= nv; k++) {
				# a per-thread-only 7000 (the row has a ptds symbol): not a default version
				if (vv[k] == "7000" && p != "-" && nv > 1) { ptmin = 7000; continue }
				n++; ver[n] = vv[k]
			}
		}
		# the row's entries first: priv() declares each private entry point
		# before the table that names it
		tab = ""
		for (k = 1; k <= n; k++) {
			sym = (k == 1) ? b : b "_v" k
			if (b == "cuGraphInstantiate" && ver[k] == "11040") sym = "cuGraphInstantiateWithFlags"
			if (!(sym in exported)) { printf "gen-entry-points: %s version %s -> %s is not exported\n", b, ver[k], sym > "/dev/stderr"; bad = 1 }
			ps = "0"; pps = "0"
			if (suffix != "" && ((sym suffix) in exported)) { ps = "(void *)" sym suffix; pps = priv(sym suffix) }
			tab = tab sprintf("%s{%s, (void *)%s, %s, %s, %s}", (k > 1 ? ", " : ""), ver[k], sym, ps, priv(sym), pps)
		}
		if (n == 0) tab = "{0, 0, 0, 0, 0}"
		printf "static const struct fc_pa_ver pa_%d[] = {%s};\n", r, tab > paf
		rowtxt[r] = sprintf("\t{\"%s\", %d, %d, pa_%d},", b, ptmin, n, r)
	}
	print "const struct fc_pa_row fc_pa_rows[] = {" > paf
	for (r = 1; r <= nrows; r++) print rowtxt[r] > paf
	print "};" > paf
	printf "const unsigned fc_pa_nrows = %d;\n", nrows > paf
	if (bad) exit 1
	printf "gen-entry-points: %d rows, %d exported names (%d legacy, %d extra)\n", nrows, nexp, nlegacy, nextra > "/dev/stderr"
}
