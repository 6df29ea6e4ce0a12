# Generates libnvidia-ml.so.1's version script and NOT_SUPPORTED stubs from
# nvml-entry-points.txt (run by make). Usage: awk -v out=DIR -f gen-nvml.awk nvml-entry-points.txt
/^#/ || NF == 0 { next }
{ name[++n] = $1 }
END {
	mapf = out "/libnvidia-ml.map"; stf = out "/nvml_stubs.c"
	print "/* generated from native/fakecuda/nvml-entry-points.txt by gen-nvml.awk; do not edit */" > mapf
	print "{\n  global:" > mapf
	for (i = 1; i <= n; i++) printf "    %s;\n", name[i] > mapf
	print "  local: *;\n};" > mapf
	print "/* generated from native/fakecuda/nvml-entry-points.txt by gen-nvml.awk; do not edit */" > stf
	print "/* NVML functions fakecuda does not model: present, and answer NVML_ERROR_NOT_SUPPORTED. */" > stf
	print "#define FC_STUB(name) __attribute__((weak, visibility(\"default\"))) int name(void); \\" > stf
	print "\t__attribute__((weak, visibility(\"default\"))) int name(void) { return 3; }" > stf
	for (i = 1; i <= n; i++) if (name[i] != "nvmlErrorString") printf "FC_STUB(%s)\n", name[i] > stf
}
