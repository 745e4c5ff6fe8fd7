// Headers that nearly every C++ test includes and that cost most of its
// compile time (gRPC, the generated dedup.v1 API, GoogleTest), precompiled
// once for all test targets by tests/CMakeLists.txt. Nothing here may depend
// on a target's own definitions.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
