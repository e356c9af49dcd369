# make demo / make test: each sets itself up (virtualenv, pinned deps from constraints.txt, graphviz) first.
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.relaytrace-installed
# the tests in two processes, each test file in one of them (its module's builds shared);
# PARALLEL= runs them in one
PARALLEL ?= -n 2 --dist loadfile

.PHONY: demo test test-slow test-heavy lint bench setup bytecode graphviz browser cross node clean

demo: setup
	$(VENV)/bin/relaytrace demo --out relaytrace-out --force

# make test: the lint step, then every test not marked slow (18 minutes on 2 cores), those
# marked serial (timings compared, ranked or limited) alone after the others;
# make test-slow: the full-size builds, transformers through ONNX, symbolic lengths, the
# browser's. CI runs both.
test: lint browser cross node
	$(PY) -m pytest -q -m "not slow and not serial" $(PARALLEL) --durations=15
	$(PY) -m pytest -q -m "serial and not slow" --durations=5

# ruff's lint and format check over all the code (pyproject.toml [tool.ruff]; `ruff
# format` rewrites it); mypy over the whole package ([tool.mypy]).
lint: setup
	$(VENV)/bin/ruff check relaytrace tests tools benchmarks
	$(VENV)/bin/ruff format --check relaytrace tests tools benchmarks
	$(VENV)/bin/mypy

test-slow: setup browser cross
	$(PY) -m pytest -q -m "slow and not heavy and not serial" $(PARALLEL) --durations=0
	$(PY) -m pytest -q -m "slow and serial and not heavy" --durations=0

# the slow tests whose coverage others hold at a smaller size: before a release, not in CI
test-heavy: setup browser cross
	$(PY) -m pytest -q -m heavy $(PARALLEL) --durations=0

bench: setup browser
	$(PY) benchmarks/summary.py
	$(PY) benchmarks/compile_overhead.py
	$(PY) benchmarks/compile_overhead.py --only scale --runs 7
	$(PY) benchmarks/readers.py
	$(PY) benchmarks/tracking_breakdown.py
	$(PY) benchmarks/profiler_fidelity.py

setup: $(STAMP) graphviz bytecode

# The editable install leaves relaytrace's modules uncompiled, and with
# PYTHONDONTWRITEBYTECODE set every command would compile them again (half of a
# `relaytrace query`); compile them as a regular pip install does.
bytecode: $(STAMP)
	@$(PY) -m compileall -q relaytrace

# setup.cfg says the ranges relaytrace needs; constraints.txt the exact versions it is
# tested with, which this install (and so CI) takes.
$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -c constraints.txt -e '.[torch,onnx,rpc,graph,test]'
	touch $(STAMP)

graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  echo "graphviz 'dot' is missing: installing Debian's graphviz package"; \
	  { apt-get update -q && apt-get install -y -q graphviz; } >/dev/null 2>&1 || \
	  { echo "could not install graphviz; run: sudo apt-get install graphviz"; exit 1; }; }

# The HTML report is tested in Debian's headless Chromium; without it that test is
# skipped with a message saying so.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the HTML report test"; \
	  { apt-get update -q && apt-get install -y -q chromium; } >/dev/null 2>&1 || \
	  echo "could not install chromium: the browser test will be skipped"; }

# The report's pure JavaScript is tested in node (tests/pure/test_report_js.py).
node:
	@command -v node >/dev/null 2>&1 || { \
	  echo "installing Debian's nodejs for the report's JavaScript tests"; \
	  { apt-get update -q && apt-get install -y -q nodejs; } >/dev/null 2>&1 || \
	  { echo "could not install nodejs; run: sudo apt-get install nodejs"; exit 1; }; }

# A build for another CPU (aarch64) is linked by its cross compiler in
# tests/test_remote.py; without it that test is skipped with a message saying so.
cross:
	@command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || { \
	  echo "installing Debian's g++-aarch64-linux-gnu for the cross-compilation test"; \
	  { apt-get update -q && apt-get install -y -q g++-aarch64-linux-gnu; } >/dev/null 2>&1 || \
	  echo "could not install g++-aarch64-linux-gnu: the cross-compilation test will be skipped"; }

clean:
	rm -rf $(VENV) build *.egg-info
