.PHONY: fakecuda test-fakecuda
fakecuda:
test-fakecuda:
