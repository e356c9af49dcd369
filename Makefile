# make demo / make test: each sets itself up (virtualenv, pinned deps, graphviz) first.
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.relaytrace-installed

.PHONY: demo test test-fast bench setup graphviz native browser clean

demo: setup
	$(VENV)/bin/relaytrace demo --out relaytrace-out --force

test: setup browser
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PY) benchmarks/compile_overhead.py
	$(PY) benchmarks/tracking_breakdown.py
	$(PY) benchmarks/profiler_fidelity.py

setup: $(STAMP) graphviz native

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[torch,onnx,test]'
	touch $(STAMP)

graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  echo "graphviz 'dot' is missing: installing Debian's graphviz package"; \
	  { apt-get update -q && apt-get install -y -q graphviz; } >/dev/null 2>&1 || \
	  { echo "could not install graphviz; run: sudo apt-get install graphviz"; exit 1; }; }

# Tracing reads TVM's IR through a small C++ reader that tvm_ffi compiles on first use
# (a C++ compiler and ninja; cached under ~/.cache/tvm-ffi). Without them tracing still
# works, with a slower Python reader. Built here once, so no build pays for it.
native: $(VENV)/.relaytrace-native

$(VENV)/.relaytrace-native: relaytrace/native/digest.cc $(STAMP)
	@{ command -v c++ && command -v ninja; } >/dev/null 2>&1 || { \
	  echo "installing Debian's g++ and ninja-build for relaytrace's native IR reader"; \
	  { apt-get update -q && apt-get install -y -q g++ ninja-build; } >/dev/null 2>&1 || \
	  echo "could not install g++/ninja-build: tracing will use the slower Python IR reader"; }
	@$(PY) -c "from relaytrace.digest import native_status; print('relaytrace IR reader:', native_status())"
	@touch $@

# The HTML report is tested in Debian's headless Chromium; without it that test is
# skipped with a message saying so.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the HTML report test"; \
	  { apt-get update -q && apt-get install -y -q chromium; } >/dev/null 2>&1 || \
	  echo "could not install chromium: the browser test will be skipped"; }

clean:
	rm -rf $(VENV) build *.egg-info
