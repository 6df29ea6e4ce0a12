# Monitoring: the Prometheus alerting rules and the Grafana dashboard under
# etc/monitoring, checked with promtool (syntax and rule unit tests) and
# against a live gpusliced scraped by Debian's prometheus (tests/monitoring).
.PHONY: test-monitoring

MONITORING_DIR := $(ROOT)/etc/monitoring

test-monitoring: go-build fakecuda interceptor ## promtool check/test the alert rules; prometheus evaluates every dashboard query against a live gpusliced
	promtool check rules $(MONITORING_DIR)/gpuslice-alerts.yml
	cd $(MONITORING_DIR) && promtool test rules gpuslice-alerts.test.yml
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 5m ./tests/monitoring/...
