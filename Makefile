# Two commands do all set-up on a fresh machine:
#   make autoloop   -- install into .venv and run `ytk autoloop` on the worked example
#   make test       -- install into .venv (plus the model zoo's extra, the TensorRT headers the shim tests
#                      compile against and the aarch64 cross toolchain of the cross-build tests), lint with ruff
#                      and run the test suite (what CI runs)
PYTHON ?= python3
VENV ?= .venv
ARCH ?= auto
WORKDIR ?= runs/efficientvit_b1
BIN := $(VENV)/bin
STAMP := $(VENV)/.ytk-installed
ZOO_STAMP := $(VENV)/.ytk-zoo-installed
TEST_STAMP := $(VENV)/.ytk-test-installed

$(STAMP): requirements/base.txt requirements/packages.txt requirements/constraints.txt pyproject.toml hookspecs/pyproject.toml $(wildcard backends/*/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q -r requirements/base.txt
	touch $(STAMP)

# The model zoo's extra (timm, torchvision; contrib/zoo): the tests need it, `install` and `autoloop` do not.
$(ZOO_STAMP): $(STAMP) requirements/zoo.txt
	$(BIN)/python -m pip install -q -r requirements/zoo.txt
	touch $(ZOO_STAMP)

# NVIDIA's public TensorRT headers the plugin-shim tests compile against (tests/data/tensorrt/README.md): fetched
# once from PyPI, every file checked against its SHA-256, never committed; the fetched NvInferVersion.h is the stamp.
# Without network the fetch fails in seconds, writes why to tests/data/tensorrt/10.14/FETCH_FAILED (the skip
# reason those tests give) and the tests run on; the next `make test` tries again.
TRT_HEADERS_STAMP := tests/data/tensorrt/10.14/include/NvInferVersion.h
$(TRT_HEADERS_STAMP): tests/data/tensorrt/fetch_headers.py | $(STAMP)
	@$(BIN)/python tests/data/tensorrt/fetch_headers.py || echo "note: TensorRT headers not fetched; the shim tests that compile against them are skipped (tests/data/tensorrt/10.14/FETCH_FAILED says why)"

# The aarch64 cross build the tests make of a real plugin (DRIVE Orin / Jetson; tests/data/cross/README.md): Debian's
# cross compiler, installed by name when this is a Debian/Ubuntu machine and we may (root), and the CUDA runtime built
# for aarch64, fetched once from PyPI and checked like the headers. When either is impossible, the tests that need it
# skip with the reason (tests/data/cross/*.FETCH_FAILED, or the missing compiler) and the rest run on.
CROSS_CUDA_STAMP := tests/data/cross/cuda-13.0-aarch64/lib/libcudart_static.a
$(CROSS_CUDA_STAMP): tests/data/cross/fetch_target.py | $(STAMP)
	@$(BIN)/python tests/data/cross/fetch_target.py || echo "note: the aarch64 CUDA runtime was not fetched; the cross-build tests are skipped (tests/data/cross/cuda-13.0-aarch64.FETCH_FAILED says why)"

cross-toolchain:
	@command -v aarch64-linux-gnu-g++ >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -q --no-install-recommends g++-aarch64-linux-gnu >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends g++-aarch64-linux-gnu >/dev/null 2>&1; }; } && \
	  echo "installed g++-aarch64-linux-gnu (the cross-build tests use it)"; } || \
	  echo "note: no aarch64-linux-gnu-g++ and it could not be installed here (apt-get as root); the cross-build tests are skipped"

# The test tools (pytest, hypothesis): the tests need them, the runtime does not.
$(TEST_STAMP): $(STAMP) requirements/test.txt
	$(BIN)/python -m pip install -q -r requirements/test.txt
	touch $(TEST_STAMP)

install: $(STAMP)

install-zoo: $(ZOO_STAMP)

# The linter first (seconds): pyflakes and pycodestyle rules, pyproject.toml [tool.ruff].
# Then commit subjects of at most 72 characters, for every commit after the last one that broke that rule.
SUBJECTS_FROM ?= 1e1ede6d82e4e94c68fe33ed6bf43114379f0e06
lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	@if git cat-file -e $(SUBJECTS_FROM) 2>/dev/null; then \
	  git log --format='%h %s' $(SUBJECTS_FROM)..HEAD | awk '{s = substr($$0, index($$0, " ") + 1)} \
	    length(s) > 72 {print "commit subject over 72 characters (" length(s) "): " $$0; bad = 1} END {exit bad}'; \
	else echo "lint: commit $(SUBJECTS_FROM) is not in this clone; commit subjects not checked"; fi

# Two pytest workers (pytest-xdist), each test file whole on one of them (module fixtures are built once), taken
# in collection order, where tests/conftest.py puts the longest files first (LONGEST_FIRST) so that short ones fill
# the end. TEST_JOBS=0 runs it in one process.
TEST_JOBS ?= 2
test: $(STAMP) $(TEST_STAMP) $(ZOO_STAMP) $(TRT_HEADERS_STAMP) $(CROSS_CUDA_STAMP) cross-toolchain lint
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder

autoloop: $(STAMP)
	$(BIN)/ytk autoloop contrib/models/efficientvit_b1/model.py -a $(ARCH) -p fp16 --workdir $(WORKDIR)

.PHONY: install install-zoo lint test autoloop cross-toolchain
