# Docs: every relative link in README.md and docs/ resolves in the tree and
# among the gpuslice package's installed files; `make build` without the
# build dependencies names `make deps`; docs/install.md's "Without a GPU"
# commands and the "Verify" steps that need no cluster run as written on
# fakecuda, printing what the page shows (tests/docs, as root); each
# platform's numbered path names only what the package installs, make
# targets that exist, gpuslice commands the CLI accepts and the shipped
# slurm.conf lines, and its slurm-config steps run; every message in the
# code is on docs/troubleshooting.md; README's first screen shows the
# two commands and the product's own refusal and step-end lines; docs/flow.dot renders
# and docs/flow.svg is its current rendering.
.PHONY: test-docs docs-flow

test-docs: go-build fakecuda-libs fakecuda-examples interceptor ctxprobe ## docs links resolve in the tree and in the installed package; make build's missing-deps message; install.md's fakecuda examples and platform paths; every message is on troubleshooting.md; docs/flow.dot renders
	$(GO) test -count=1 ./tests/docs/...

# The picture of the flow: Graphviz source kept in the repository, the SVG
# the pages show rendered from it (graphviz comes with `make deps`).
docs-flow: docs/flow.svg ## render docs/flow.dot into docs/flow.svg (Graphviz's dot; make deps installs it)

docs/flow.svg: docs/flow.dot
	@command -v dot >/dev/null || { echo "docs-flow: Graphviz's dot is missing: run 'make deps'" >&2; exit 1; }
	dot -Tsvg $< -o $@
