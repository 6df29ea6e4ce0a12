.PHONY: go-build test-go bench
go-build:
test-go:
bench:
