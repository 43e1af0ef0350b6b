# graviton.llama_rpc developer entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
LLAMA_RPC_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/graviton-llama-rpc
export LLAMA_RPC_CACHE STAGES SCENARIOS

# Runs a command inside the prepared test bed environment (venv, collection path).
IN_BED = bash -c '. tests/bed/lib.sh && VENV=$$(bash tests/bed/venv.sh) && . tests/bed/env.sh && "$$@"' in-bed

.PHONY: help check test lint sanity units lowest molecule role images venv demo demo-stop demo-start demo-clean bench build docs families bench-build bench-faults bench-first-load bench-load bench-master bench-master-read bench-start bench-spec bench-tensor bench-restart bench-tunnel bench-test-parts bench-test-cpu constraints clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

check: ## Static checks and unit tests with a virtualenv only (no root, apt or docker)
	@LLAMA_RPC_VENV_ONLY=1 bash tests/run.sh

test: ## Everything: test bed setup, ansible-lint, sanity, build, unit and container tests, every Molecule scenario (times: docs/contributing.md)
	@bash tests/run.sh

lint: ## ansible-lint (production profile) and the example pipeline's checks only, venv only
	@$(MAKE) --no-print-directory check STAGES=lint

sanity: ## ansible-test sanity only, venv only
	@$(MAKE) --no-print-directory check STAGES=sanity

units: ## pytest unit tests only, venv only
	@$(MAKE) --no-print-directory check STAGES=units

lowest: ## ansible-lint, sanity and unit tests on the lowest ansible-core requires_ansible admits (2.17)
	@$(MAKE) --no-print-directory test STAGES=lowest

molecule: ## Molecule scenarios only (SCENARIOS="a b" to choose)
	@$(MAKE) --no-print-directory test STAGES=molecule

role: ## One role's own checks (ROLE=rpc_tunnel): unit tests, its refusals, the role alone on fresh hosts (aws_infra: its scenario)
	@bash tests/bed/role.sh "$(ROLE)"

images: ## Build the systemd base images (Debian bookworm and trixie) offline
	@bash tests/bed/host.sh && bash tests/bed/images.sh

venv: ## Create the test virtualenv and print its path
	@bash tests/bed/venv.sh

build: ## Build the collection tarball into the current directory
	@$(IN_BED) ansible-galaxy collection build --force .

docs: ## Rewrite the variable tables in the role READMEs from meta/argument_specs.yml
	@$(IN_BED) python -m tests.tools.role_docs

bench-first-load: ## Benchmark the first load on the local cluster: cold vs staged vs warm, each split into its parts
	@bash demo/demo.sh first-load

families: ## Each architecture family's small model deployed with deploy.yml on the local cluster, fully and partly offloaded: plan vs llama.cpp's buffers, tokens vs the master alone
	@bash demo/demo.sh families

bench-build: ## Benchmark llama_build: compile CPU-seconds for 3 identical hosts vs 1, re-run vs first run
	@bash tests/bench/run.sh tests.bench.build_once

bench-load: ## Benchmark the first load: the load-time model's constants, then loads of 1, 3, 6 GB cold/staged/warm beside its predictions
	@bash tests/bench/run.sh tests.bench.load

bench-start: ## Benchmark a stopped cluster's start: stock, hash-ahead and known-hashes masters, every page cache dropped or one side's held, 1, 3, 6 GB beside the load-time model
	@bash tests/bench/run.sh tests.bench.start

bench-spec: ## Benchmark speculative decoding through 0, 1, 2 workers: tokens/s at fixed acceptance lengths (--spec-synth-len), the gain against it, the round trip's share, 4 clients
	@bash tests/bench/run.sh tests.bench.spec

bench-tensor: ## Benchmark tensor parallelism against the layer split over 2 and 3 workers: tokens/s, the memory's read rate on 1 and 2 cores, messages a token, the load, speculation at L=3
	@bash tests/bench/run.sh tests.bench.tensor

bench-fetch: ## Benchmark a model's first fetch: one connection per part against 8 (byte ranges), each capped as a CDN edge is, beside what the cap allows
	@bash tests/bench/run.sh tests.bench.fetch

bench-master-read: ## Benchmark the master's read of the model: mmap's populate, the load, the disk's bytes, with the page cache warm, dropped, capped below the file
	@bash tests/bench/run.sh tests.bench.master_read

bench-master: ## Benchmark rpc_master: deployed vs by-hand tokens/s, load time -fit off vs on, worker cache warm vs cold
	@bash tests/bench/run.sh tests.bench.master

bench-tunnel: ## Benchmark the WireGuard tunnel on the local cluster: bench.yml plain vs through the tunnel, side by side
	@bash demo/demo.sh tunnel

bench-faults: ## Faults under load on the local cluster (killed, frozen, cut off, rebooted), then an upgrade and back: a table
	@bash demo/demo.sh faults

bench-test-parts: ## Each part of make test alone (checks, scenarios, integration tests): wall, CPU-seconds, idle cores; a table
	@bash tests/bed/parts_alone.sh

bench-test-cpu: ## make test under process accounting (root): CPU-seconds by command, and Ansible's part (runs, forks, modules); as long as make test
	@bash tests/bed/cpu_accounting.sh

demo: ## Bring up the local cluster (master + 2 workers in containers, demo model, inference, llama-server)
	@bash demo/demo.sh up

bench: ## Benchmark the local cluster (make demo's; brought up if needed): report, chart, comparison with the last run
	@bash demo/demo.sh bench

demo-stop: ## Stop the local cluster (services, then containers), keeping everything in it
	@bash demo/demo.sh stop

demo-start: ## Start the stopped local cluster again: nothing rebuilt or fetched; prints the time to the first token
	@bash demo/demo.sh start

bench-restart: ## The local cluster's time to serve again after a stop, beside a first deploy's (caches empty), one run
	@bash demo/demo.sh restart

demo-clean: ## Remove what make demo brought up
	@bash demo/demo.sh down

constraints: ## Re-freeze requirements/constraints*.txt after changing a pin
	@bash tests/bed/constraints.sh

clean: ## Remove this checkout's Molecule state and built tarballs (caches are kept)
	rm -rf .ansible graviton-llama_rpc-*.tar.gz
