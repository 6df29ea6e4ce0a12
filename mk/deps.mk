# deps: install what builds and tests need. Debian packages via apt-get when
# running as root; Go modules through the module proxy.
DEB_PKGS := gcc make libc6-dev pkg-config libslurm-dev slurmd slurmctld slurm-client munge \
            rpm lintian prometheus systemd passwd procps

.PHONY: deps
deps: ## install build/test dependencies (apt-get as root, go mod download)
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done | tr '\n' ' '); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing $$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	  else echo "deps: missing Debian packages (run as root or install): $$missing" >&2; exit 1; fi; \
	fi
	@$(GO) mod download
