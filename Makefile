# Yoke: the two commands a user needs are `make demo` and `make test`.
# Both install missing Debian packages first (scripts/install-deps.sh).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all deps build test demo bench bazel-test docker-test k8s-validate fuzz clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: deps $(BUILD)/build.ninja
	@ninja -C $(BUILD) -j $(JOBS)

# The whole suite: unit, integration and end-to-end tests (GPU tests skip
# visibly without a device).
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The main job: a local cluster (`yoke up`: a coordinator and two workers),
# the Fashion-MNIST CNN (configs/fashion_mnist_cnn.yaml) submitted and watched
# to the end, then the cluster stopped (scripts/demo.sh).
demo: build
	@scripts/demo.sh $(BUILD)

# Yoke against PyTorch on the same recipes (installs the PyTorch peer).
bench: build
	@scripts/install-deps.sh bench
	@bench/train_vs_pytorch.sh $(BUILD)

bazel-test:
	@scripts/install-deps.sh bazel
	@bazel test //... --test_output=errors

# The image built for real from deploy/docker/Dockerfile on a Debian 12 base
# made here (debootstrap + docker import, no registry), then a coordinator and
# two workers from it on a Docker network, each worker advertising its own
# container IP, training a 1-worker and a 2-worker job to SUCCEEDED
# (deploy/docker/test.sh). Needs root; starts and stops its own dockerd unless
# one is running. Caches the base tree and Docker's layers in
# /var/cache/yoke-docker-test, so later runs rebuild only what changed.
docker-test:
	@scripts/install-deps.sh docker
	@deploy/docker/test.sh

# deploy/k8s, base and overlays, rendered and validated against the
# Kubernetes API schemas offline (also part of `make test`).
k8s-validate: deps
	@tests/k8s_manifests_test.sh

# libFuzzer targets (tests/fuzz: the YAML spec loader, the IDX/CIFAR/CSV
# readers, the checkpoint reader, the coordinator's handlers), built with
# clang, ASan and UBSan in build-fuzz, each run FUZZ_SECONDS (default 60)
# from its seed corpus; fails if any target crashes, leaks or hangs.
FUZZ_SECONDS ?= 60
# Only the YAML target has been built and run so far (see docs/build.md);
# FUZZ_TARGETS="job_spec_yaml_fuzz dataset_readers_fuzz checkpoint_fuzz
# coordinator_fuzz" tries all four.
FUZZ_TARGETS ?= job_spec_yaml_fuzz
fuzz:
	@scripts/install-deps.sh fuzz
	@cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DYOKE_FUZZ=ON -DYOKE_WITH_CUDA=OFF \
	  -DYOKE_BUILD_BENCH=OFF >/dev/null
	@ninja -C build-fuzz -j $(JOBS) $(FUZZ_TARGETS)
	@tests/fuzz/run.sh build-fuzz/bin $(FUZZ_SECONDS) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD)
