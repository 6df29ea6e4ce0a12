.PHONY: install packages test-packages
install:
packages:
test-packages:
