# Docs: every relative link in README.md and docs/ resolves in the tree and
# among the gpuslice package's installed files; `make build` without the
# build dependencies names `make deps`; docs/install.md's "Without a GPU"
# commands and the "Verify" steps that need no cluster run as written on
# fakecuda, printing what the page shows (tests/docs, as root).
.PHONY: test-docs

test-docs: go-build fakecuda-libs fakecuda-examples interceptor ctxprobe ## docs links resolve in the tree and in the installed package; make build's missing-deps message; install.md's fakecuda examples run as written
	$(GO) test -count=1 ./tests/docs/...
