# Docs: every relative link in README.md and docs/ resolves in the tree and
# among the gpuslice package's installed files; `make build` without the
# build dependencies names `make deps` (tests/docs).
.PHONY: test-docs

test-docs: ## docs links resolve in the tree and in the installed package; make build's missing-deps message
	$(GO) test -count=1 ./tests/docs/...
