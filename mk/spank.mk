.PHONY: spank test-slurm
spank:
test-slurm:
