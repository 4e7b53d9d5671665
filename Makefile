# Yoke: the two commands a user needs are `make demo` and `make test`.
# Both install missing Debian packages first (scripts/install-deps.sh).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all deps build test demo bench bazel-test bazel-ci docker-test k8s-validate fuzz test-asan \
        san-build gpu-bundle gpu-check clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: deps $(BUILD)/build.ninja
	@ninja -C $(BUILD) -j $(JOBS)

# The whole suite: unit, integration and end-to-end tests (GPU tests skip
# visibly without a device).
# It closes with a summary of every skipped test and test case, and why
# (scripts/test_summary.py), so a CPU-only run never hides a skipped path.
# A build without a test history (a fresh clone, CI) gets the recorded test
# times (tests/ctest_costs.txt), so ctest starts the longest tests first
# instead of ending on them; ctest updates its copy after every run.
SEED_COSTS = { [ -s Testing/Temporary/CTestCostData.txt ] || \
  { mkdir -p Testing/Temporary && cp $(CURDIR)/tests/ctest_costs.txt Testing/Temporary/CTestCostData.txt; }; }
test: build
	@cd $(BUILD) && $(SEED_COSTS) && rm -rf test-results && mkdir -p test-results && \
	  { ctest --output-on-failure -j $(JOBS) --output-junit $$PWD/test-results/ctest.junit.xml; rc=$$?; \
	    python3 $(CURDIR)/scripts/test_summary.py .; exit $$rc; }

# The main job: a local cluster (`yoke up`: a coordinator and two workers),
# the Fashion-MNIST CNN (configs/fashion_mnist_cnn.yaml) submitted and watched
# to the end, then the cluster stopped (scripts/demo.sh).
demo: build
	@scripts/demo.sh $(BUILD)

# Yoke against PyTorch on the same recipes (installs the PyTorch peer):
# throughput and memory, then test accuracy over 5 seeds (MLP 5 epochs, CNN
# 2 epochs: mean, standard deviation, standard error), then the one table of
# Yoke against TensorFlow 2.21 / Keras 3 and PyTorch 2.x (installed into
# $(BUILD)/bench-venv) and PyTorch 1.13 on four recipes (bench/peers_vs_yoke.sh;
# EPOCHS and RUNS set its length), then what metrics, event files and the
# dashboard cost a running job (bench/observability_overhead.sh), then
# ResNet-50 training throughput against PyTorch eager (bench/resnet50_vs_torch.sh).
bench: build
	@BENCH_VENV=$(BUILD)/bench-venv scripts/install-deps.sh bench
	@bench/train_vs_pytorch.sh $(BUILD)
	@bench/accuracy_seeds.sh $(BUILD)
	@bench/peers_vs_yoke.sh $(BUILD)
	@bench/observability_overhead.sh $(BUILD)
	@bench/resnet50_vs_torch.sh $(BUILD)

bazel-test:
	@scripts/install-deps.sh bazel
	@bazel test //... --test_output=errors

# What CI asks of Bazel: every BUILD file loads and every target of //...
# is analysed (labels, visibility, deps), and the tests whose subject is the
# Bazel build itself run: the ODR check over Bazel's own archives, which
# compiles and links every library, so a library's missing dep fails here.
# The test and binary targets are analysed, not compiled: they are the same
# sources as the CMake suite's, which `make test` and `make test-asan` build
# and run, and compiling them a third time cost CI about 10 minutes.
# The libraries compile unoptimized (fastbuild, -O0): the check reads their
# symbols, not their speed, and -O3 made the stage 824 s in CI.
# `make bazel-test` builds and runs everything.
BAZEL_ONLY_TESTS = //tests:odr_check //tests:odr_check_self_test
BAZEL_CI_FLAGS = --compilation_mode=fastbuild --copt=-O0
bazel-ci:
	@scripts/install-deps.sh bazel
	@bazel build $(BAZEL_CI_FLAGS) --nobuild //... && \
	  bazel test $(BAZEL_CI_FLAGS) $(BAZEL_ONLY_TESTS) --test_output=errors

# The image built for real from deploy/docker/Dockerfile on a Debian 12 base
# made here (debootstrap + docker import, no registry), then a coordinator and
# two workers from it on a Docker network, each worker advertising its own
# container IP, training a 1-worker and a 2-worker job to SUCCEEDED
# (deploy/docker/test.sh). Needs root; starts and stops its own dockerd unless
# one is running. Caches the base tree and Docker's layers in
# /var/cache/yoke-docker-test, so later runs rebuild only what changed.
# YOKE_DOCKER_BINARIES=build/bin puts the daemons of a `make build` in place
# of the Dockerfile's compile stage (CI does, after `make test`).
docker-test:
	@scripts/install-deps.sh docker
	@deploy/docker/test.sh

# deploy/k8s, base and overlays, rendered and validated against the
# Kubernetes API schemas offline (also part of `make test`).
k8s-validate: deps
	@tests/k8s_manifests_test.sh

# The sanitized build both targets below share: clang, every library and
# binary with ASan and UBSan (UBSan findings abort) and libFuzzer's coverage
# (-DYOKE_FUZZ=ON), in build-fuzz. From scratch it takes about as long as
# the main build, so neither target is part of `make test`; CI runs both
# (.ci/run).
SAN_BUILD = build-fuzz
$(SAN_BUILD)/build.ninja:
	@scripts/install-deps.sh fuzz
	@cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DYOKE_FUZZ=ON -DYOKE_WITH_CUDA=OFF \
	  -DYOKE_BUILD_BENCH=OFF -DYOKE_TEST_PCH=ON -DCMAKE_UNITY_BUILD=ON >/dev/null

# libFuzzer targets (tests/fuzz: the YAML spec loader, the IDX/CIFAR/CSV
# readers, the JPEG/PNG decoders, the checkpoint reader, the coordinator's handlers), each run
# FUZZ_SECONDS (default 60) from its seed corpus; fails if any target
# crashes, leaks, hits undefined behaviour or hangs.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= job_spec_yaml_fuzz dataset_readers_fuzz image_decode_fuzz checkpoint_fuzz \
                coordinator_fuzz
# FUZZ_JOBS targets run at once (default: the number of cores), each on a
# core of its own for its FUZZ_SECONDS.
FUZZ_JOBS ?= $(JOBS)
fuzz: $(SAN_BUILD)/build.ninja
	@ninja -C $(SAN_BUILD) -j $(JOBS) $(FUZZ_TARGETS)
	@FUZZ_JOBS=$(FUZZ_JOBS) tests/fuzz/run.sh $(SAN_BUILD)/bin $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The suite under ASan and UBSan: every test but the GPU, slow and
# multi-host ones (their timings assume an unsanitized build), the
# PyTorch parity ones (minutes of training, the same math as the release
# build's), the checks of the repository's files (tree, deploy), which
# run no compiled code, the Python-driven ones (label python: the Python
# client's and the ONNX export's checks against onnxruntime; the export
# code's C++ tests, export/*_test.cc, do run here), and SAN_SKIP: the tests that train for minutes under
# ASan (measured: coordinator_restart 369 s, worker_crash 302 s, train 177 s,
# custom_loop_2rank 113 s, resnet50_image_folder 79 s, custom_loop_1rank
# 64 s; 1,104 of the suite's 2,000 CPU-seconds). Their training runs the
# kernels the unit tests already check under ASan, and `make test` runs
# them all; the daemons stay under ASan in the other end-to-end tests
# (cluster, security, coordinator_crash, data_parallel, observability,
# cancel, bad_input and more).
# SAN_SKIP also holds coordinator_memory_e2e, which bounds the
# coordinator's resident memory: ASan's allocator adds redzones and keeps
# freed memory in quarantine, so that bound holds only for the real
# allocator (the release build runs it).
# tests/lsan.supp names the third-party leaks LeakSanitizer must not count.
# allocator_may_return_null: an allocation ASan cannot serve returns null,
# as malloc does, instead of aborting; the out-of-memory tests need that.
SAN_SKIP := tests_coordinator_restart_e2e_test|tests_worker_crash_e2e_test|tests_train_e2e_test
SAN_SKIP := $(SAN_SKIP)|examples_custom_loop_2rank_test|examples_custom_loop_1rank_test
SAN_SKIP := $(SAN_SKIP)|tests_resnet50_image_folder_e2e_test|tests_coordinator_memory_e2e_test
SAN_CTEST_ARGS ?= -LE "gpu|slow|multihost|parity|tree|deploy|python" -E "^($(SAN_SKIP))$$"
# It builds only what its selection runs (scripts/test_targets.py), not the
# binaries of the tests it leaves out. san-build builds that and the fuzz
# targets (CI runs it as a step of its own, before make fuzz).
SAN_TEST_TARGETS = $$(scripts/test_targets.py $(SAN_BUILD) $(SAN_CTEST_ARGS))
san-build: $(SAN_BUILD)/build.ninja
	@targets=$(SAN_TEST_TARGETS) && ninja -C $(SAN_BUILD) -j $(JOBS) $(FUZZ_TARGETS) $$targets
test-asan: $(SAN_BUILD)/build.ninja
	@targets=$(SAN_TEST_TARGETS) && ninja -C $(SAN_BUILD) -j $(JOBS) $$targets
	@cd $(SAN_BUILD) && $(SEED_COSTS) && rm -rf test-results && mkdir -p test-results && \
	  { ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 \
	    LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    ctest --output-on-failure -j $(JOBS) $(SAN_CTEST_ARGS) \
	      --output-junit $$PWD/test-results/ctest.junit.xml; rc=$$?; \
	    python3 $(CURDIR)/scripts/test_summary.py .; exit $$rc; }

# The checks that need a GPU (docs/build.md, "GPU checks"). Here: build the
# CUDA test binaries and pack them with the libraries a lent GPU machine lacks
# (gpu-bundle/yoke-gpu.tar.gz). There, from the repository root with the
# bundle carried: run the stages (GPU_STAGES=1,2,3,4 by default) and write their JSON
# to $$OUT, or gpu-check-out/.
GPU_STAGES ?= 1,2,3,4
gpu-bundle: build
	@ninja -C $(BUILD) yoke-trainer-cuda yoke-trainer yoke-worker yoke-coordinator yoke $$(cd $(BUILD) && ctest -N -L '^gpu$$' | sed -n 's/^ *Test *#[0-9]*: *//p')
	@scripts/gpu_bundle.sh $(BUILD) gpu-bundle/yoke-gpu.tar.gz

gpu-check:
	@python3 scripts/gpu_check.py --stages $(GPU_STAGES) --bundle gpu-bundle/yoke-gpu.tar.gz

clean:
	rm -rf $(BUILD)
