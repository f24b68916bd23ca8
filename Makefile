# jupyterhub-gpu: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STATE := .state
CHP_VERSION := 4.6.3
PYTEST_ARGS ?=
# make test spreads the tests over this many pytest-xdist workers (most tests wait on hubs and ticks, not
# on the CPU); Docker and chaos tests stay together in one worker, k8s tests in one (tests/conftest.py)
TEST_WORKERS ?= 3
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help demo test test-quick test-contract test-lab test-docker test-k8s k8s-setup k8s-stop k8s-build-early lint format venv catalogs messages docker-setup postgres-setup browser-setup prometheus-setup test-image tf-test-image k8s-hub-image image clean docs

help:
	@echo "make demo        set everything up and run the embedded demo at http://127.0.0.1:8000"
	@echo "make test        set everything up (Docker engine and test image included) and run every test"
	@echo "make test-quick  unit and hub tests only (no Docker, no browser)"
	@echo "make test-contract  JupyterHub's own spawner tests with GPULocalSpawner (part of make test)"
	@echo "make test-k8s    the k8s layer alone: builds (cached) and starts the one-node test cluster, then its tests"
	@echo "make k8s-stop    stop the test cluster and remove its state"
	@echo "make lint        ruff check and format check"
	@echo "make messages    extract the texts into jupyterhub_gpu/locale/ (docs/translating.md)"
	@echo "make docs        the documentation site in docs/_build/html (Sphinx; a warning fails it; part of make test)"
	@echo "make image       build the GPU single-user image jupyterhub-gpu/tensorflow:2.15 (docs/images.md)"

venv: $(VENV)/.installed catalogs

# the message catalogs' .mo files (gitignored): pip install compiles them too (hatch_build.py); this keeps a
# checkout's in step with a .po just edited
# (and each language's Lab catalog, *_lab.po, to the jupyterhub_gpu.json JupyterLab serves)
LAB_CATALOGS := $(wildcard jupyterhub_gpu/locale/*/LC_MESSAGES/*_lab.po)
CATALOGS := $(patsubst %.po,%.mo,$(filter-out $(LAB_CATALOGS),$(wildcard jupyterhub_gpu/locale/*/LC_MESSAGES/*.po))) \
	$(patsubst %_lab.po,%.json,$(LAB_CATALOGS))
catalogs: $(CATALOGS)
# the catalog template from the sources and templates, and each language's .po brought in step with it
# (docs/translating.md)
messages: $(VENV)/.installed
	$(BIN)/python tools/messages.py
%.mo: %.po $(VENV)/.installed
	$(BIN)/python hatch_build.py --stale
%.json: %_lab.po $(VENV)/.installed
	$(BIN)/python hatch_build.py --stale

$(VENV)/.installed: pyproject.toml constraints.txt labextension/package.json labextension/yarn.lock images/tensorflow/overrides.json
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@command -v node >/dev/null || { echo "Node.js >= 20.19 is needed to build labextension/ (pip install -e runs the build)"; exit 1; }
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,demo,docs]'
	@test -x $(BIN)/configurable-http-proxy || npm install --silent -g --prefix $(VENV) configurable-http-proxy@$(CHP_VERSION)
	@# the demo's JupyterLab, as the image's: no "Jupyter news" question (images/tensorflow/overrides.json)
	@install -D -m 0644 images/tensorflow/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	@touch $@

demo: venv
	@echo
	@echo "  jupyterhub-gpu demo: open http://127.0.0.1:8000"
	@echo "  Log in with any user name and the password 'demo' ('alice' is in the thesis group, 'admin' is an admin)."
	@echo "  GPUs are simulated (2x Simulated T4, 1x Simulated A100). Ctrl-C stops everything."
	@echo "  'bob' and 'carol' are in cs231n, which has 1 T4 reserved on Tuesdays 14:00-16:00 (docs/scheduling.md)."
	@echo
	$(BIN)/python config/demo_reservation.py
	$(BIN)/jupyterhub -f config/demo_config.py

# the test engine, started with the stand-in NVIDIA driver's hook on its PATH (scripts/nvml-sim-setup.sh)
docker-setup: venv
	STATE_DIR=$(STATE) bash scripts/docker-setup.sh

postgres-setup:
	bash scripts/postgres-setup.sh

test-image: venv docker-setup
	bash scripts/build-test-image.sh

# the CPU variant of the TensorFlow image, from images/tensorflow/Dockerfile (cached: skipped when up to date)
tf-test-image: test-image
	bash scripts/build-tf-image.sh cpu

# config/kubernetes/hub.Dockerfile built on a local stand-in for the chart's hub image (no registry here); the
# k8s layer runs it as a pod (cached: skipped when up to date)
k8s-hub-image: test-image
	bash scripts/build-k8s-hub-image.sh

# the GPU single-user image for a lab server (BASE_IMAGE=tensorflow/tensorflow:2.15.0-gpu; docs/images.md);
# not run by the tests. `bash scripts/build-tf-image.sh gpu-2.12` builds the 2.12 LTS variant.
image: venv docker-setup
	bash scripts/build-tf-image.sh gpu

browser-setup:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk)

# Debian's prometheus (it ships promtool) for tests/monitoring; the tests start their own on loopback, so the
# package's system service is stopped and disabled where an init system started it
prometheus-setup:
	@test -x /usr/bin/prometheus -a -x /usr/bin/promtool || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus)
	@if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then systemctl disable --now prometheus; fi

# the k8s layer's one-node cluster (scripts/k8s-setup.sh; docs/kubernetes.md "The test cluster"): Kubernetes built
# from its Go modules (cached under .cache/k8s), containerd, a simulated NVIDIA device plugin with 4 GPUs, and
# Kueue's manager built from its Go module (cached under .cache/kueue)
k8s-setup: tf-test-image k8s-hub-image
	bash scripts/k8s-setup.sh start

k8s-stop:
	bash scripts/k8s-setup.sh stop

test-k8s: venv k8s-setup
	$(BIN)/pytest -q -m k8s $(PYTEST_ARGS) tests/k8s

# the cold Kubernetes build (about 10 minutes on 2 cores), then Kueue's (tools/kueue), start first, in the
# background, beside the venv and the images (which wait on downloads much of the time); k8s-setup's own builds
# wait for them (a lock each) and reuse them
k8s-build-early:
	@mkdir -p $(STATE)
	@if command -v go >/dev/null || test -x /usr/local/go/bin/go; then \
		echo "building the k8s test layer and Kueue in the background (log: $(STATE)/k8s-build.log)"; \
		nohup bash -c 'bash scripts/k8s-build.sh; bash scripts/kueue-build.sh' >$(STATE)/k8s-build.log 2>&1 </dev/null & \
	fi

test: k8s-build-early venv postgres-setup test-image tf-test-image browser-setup prometheus-setup k8s-setup test-lab docs
	$(BIN)/pytest -q -m "" -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

test-quick: venv test-lab
	$(BIN)/pytest -q -m "not docker and not browser and not chaos and not install and not prometheus and not k8s" $(PYTEST_ARGS)

# the documentation site: the pages of docs/ and README.md, the configuration reference generated from the
# traitlets and the REST reference from openapi.yaml (docs/_ext/gpu_docs.py); -E reads every page again, so the
# generated references follow the code; -W --keep-going: every warning is listed and fails the build
docs: venv
	$(BIN)/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html
	@echo "the documentation site: docs/_build/html/index.html"

# JupyterHub's own spawner tests (from the installed jupyterhub package) with GPULocalSpawner swapped in under
# their MockSpawner, in a pytest of their own (tests/jupyterhub_contract); make test and test-quick run it too
test-contract: venv
	$(BIN)/pytest -q -m "" tests/jupyterhub_contract $(PYTEST_ARGS)

# the image registry of tests/docker/test_image_pull.py, run by the test on loopback (Debian's Distribution
# registry; the package's own service is not started here)
registry-setup:
	@test -x /usr/bin/docker-registry || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry)

test test-docker: registry-setup

test-docker: venv test-image tf-test-image
	$(BIN)/pytest -q -m docker $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd labextension && ../$(BIN)/jlpm lint:check

test-lab: venv
	cd labextension && ../$(BIN)/jlpm test

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) $(STATE) .pytest_cache .ruff_cache labextension/lib labextension/prebuilt docs/_build
