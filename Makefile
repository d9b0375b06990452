# Entry points for people: `make run` builds and runs the default benchmark,
# `make test` builds and runs every test. CMake does the real work.
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=
PYTHON ?= python3
PYENV := $(BUILD)/pyenv

.PHONY: all build run test ctest pytest sanitize install clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

# Build, then run the main job on the default problem and print what it did.
run: build
	./$(BUILD)/flashattn info
	./$(BUILD)/flashattn bench

# Build, then run every test: the C suite (ctest) and the Python package's tests.
test: build ctest pytest

ctest:
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The Python tests run in a private virtual environment holding only what they need;
# bench/tests runs the GPU benchmark scripts' logic against a stand-in for torch.
pytest: build
	@if [ ! -x $(PYENV)/bin/python ]; then $(PYTHON) -m venv $(PYENV); fi
	$(PYENV)/bin/python -m pip install -q --disable-pip-version-check numpy pytest ml_dtypes
	FLASHATTN_LIBRARY=$(abspath $(BUILD))/libflashattn.so PYTHONPATH=$(abspath python) \
	  $(PYENV)/bin/python -m pytest -q python/tests bench/tests

# The C suite under AddressSanitizer and UndefinedBehaviorSanitizer (CPU only).
sanitize:
	cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DFLASHATTN_SANITIZE=ON -DFLASHATTN_CUDA=OFF
	cmake --build build-sanitize -j$(JOBS)
	cd build-sanitize && FA_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-sanitize
