// The precompiled header of the sanitized build's test files (YOKE_TEST_PCH,
// cmake/YokeHelpers.cmake): the third-party and generated headers most test
// files include, parsed once instead of once per test. Nothing here is
// Yoke's own hand-written code, and a test file must still include what it
// uses: the release build compiles every test without this header, so a
// missing include fails there.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/config.pb.h"
#include "proto/yoke/v1/coordinator.grpc.pb.h"
#include "proto/yoke/v1/job.pb.h"
#include "spdlog/spdlog.h"
