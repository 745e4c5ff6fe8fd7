// The C++ side of the cross-language replay test (test_crosslang.py drives
// it): through RunOnce, with the JSON result convention (json_result.h).
//
//   crosslang_peer TARGET CASES_JSON store   stores cases.origins.cpp's
//       success and error under cpp:success / cpp:error
//   crosslang_peer TARGET CASES_JSON replay  replays the python and
//       typescript origins' keys, which must not run `fn`
//
// Prints "ok <check>" per check passed and "FAIL <check>: <why>" per check
// failed; exits 1 if any failed.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "client/args_hash.h"
#include "client/dedup_client.h"
#include "client/json_result.h"
#include "client/run_once.h"
#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;

int failures = 0;

void Check(bool passed, const std::string& what, const std::string& why) {
  if (passed) {
    std::cout << "ok " << what << "\n";
  } else {
    std::cout << "FAIL " << what << ": " << why << "\n";
    ++failures;
  }
}

// Values compare by their RFC 8785 form: key order and number spelling
// differ between writers, the value must not.
std::string Canonical(const json& value) {
  absl::StatusOr<std::string> canonical = dedup::CanonicalJsonOfValue(value);
  return canonical.ok() ? *canonical
                        : "<" + canonical.status().ToString() + ">";
}

std::string Describe(const dedup::StoredError& error) {
  return "{name " + json(error.name).dump() + ", message " +
         json(error.message).dump() + ", code " + error.code.dump() + "}";
}

dedup::StoredError Expected(const json& spec) {
  return dedup::StoredError{spec.at("name").get<std::string>(),
                            spec.at("message").get<std::string>(),
                            spec.value("code", json(nullptr))};
}

bool SameError(const dedup::StoredError& a, const dedup::StoredError& b) {
  return a.name == b.name && a.message == b.message && a.code == b.code;
}

struct Env {
  const dedup::Client& client;
  std::string ns;
  std::string args_hash;
};

void Store(const Env& env, const json& mine) {
  bool ran = false;
  absl::StatusOr<dedup::RunResult> success =
      dedup::RunOnce(env.client, env.ns, "cpp:success", env.args_hash,
                     [&](const dedup::Claim&) {
                       ran = true;
                       return dedup::ExecResult::SuccessJson(mine.at("value"));
                     });
  if (!success.ok()) {
    Check(false, "cpp:success stored", success.status().ToString());
  } else {
    absl::StatusOr<json> value = success->ResultJson();
    Check(ran && !success->duplicate && value.ok() &&
              Canonical(*value) == Canonical(mine.at("value")),
          "cpp:success stored",
          value.ok() ? "ran " + std::to_string(ran) + ", got " + value->dump()
                     : value.status().ToString());
  }

  const dedup::StoredError expected = Expected(mine.at("error"));
  absl::StatusOr<dedup::RunResult> error = dedup::RunOnce(
      env.client, env.ns, "cpp:error", env.args_hash, [&](const dedup::Claim&) {
        return dedup::ExecResult::PermanentErrorJson(
            expected.name, expected.message, expected.code);
      });
  if (!error.ok()) {
    Check(false, "cpp:error stored", error.status().ToString());
  } else {
    std::optional<dedup::StoredError> stored = error->ResultError();
    Check(stored.has_value() && SameError(*stored, expected),
          "cpp:error stored",
          stored ? Describe(*stored)
                 : "outcome " + std::to_string(error->outcome));
  }
}

void Replay(const Env& env, const std::string& origin, const json& spec) {
  bool ran = false;
  auto must_not_run = [&](const dedup::Claim&) {
    ran = true;
    return dedup::ExecResult::Success("\"fn ran: not a replay\"");
  };

  const std::string success_key = origin + ":success";
  absl::StatusOr<dedup::RunResult> success = dedup::RunOnce(
      env.client, env.ns, success_key, env.args_hash, must_not_run);
  if (!success.ok()) {
    Check(false, success_key + " replayed", success.status().ToString());
  } else {
    absl::StatusOr<json> value = success->ResultJson();
    Check(!ran && success->duplicate && value.ok() &&
              Canonical(*value) == Canonical(spec.at("value")),
          success_key + " replayed",
          value.ok() ? "ran " + std::to_string(ran) + ", got " + value->dump()
                     : value.status().ToString());
  }

  const std::string error_key = origin + ":error";
  const dedup::StoredError expected = Expected(spec.at("error"));
  absl::StatusOr<dedup::RunResult> error = dedup::RunOnce(
      env.client, env.ns, error_key, env.args_hash, must_not_run);
  if (!error.ok()) {
    Check(false, error_key + " replayed", error.status().ToString());
    return;
  }
  std::optional<dedup::StoredError> stored = error->ResultError();
  Check(!ran && error->duplicate && stored.has_value() &&
            SameError(*stored, expected),
        error_key + " replayed",
        (stored ? Describe(*stored)
                : "outcome " + std::to_string(error->outcome)) +
            ", ran " + std::to_string(ran));
  // PermanentErrorJson promises the TypeScript helper's exact bytes.
  if (origin == "typescript") {
    const std::string ours = dedup::EncodeStoredError(expected);
    Check(error->result == ours, error_key + " bytes",
          "stored " + error->result + ", C++ writes " + ours);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: crosslang_peer TARGET CASES_JSON store|replay\n";
    return 2;
  }
  const std::string mode = argv[3];
  std::ifstream file(argv[2]);
  std::stringstream text;
  text << file.rdbuf();
  const json cases = json::parse(text.str(), nullptr, false);
  if (cases.is_discarded()) {
    std::cerr << "crosslang_peer: " << argv[2] << " is not JSON\n";
    return 2;
  }
  absl::StatusOr<std::string> args_hash =
      dedup::ArgsHashOfValue(cases.at("args"));
  if (!args_hash.ok()) {
    std::cerr << "crosslang_peer: args: " << args_hash.status() << "\n";
    return 2;
  }
  dedup::Client client(argv[1]);
  const Env env{client, cases.at("namespace").get<std::string>(), *args_hash};
  const json& origins = cases.at("origins");
  if (mode == "store") {
    Store(env, origins.at("cpp"));
  } else if (mode == "replay") {
    for (const char* origin : {"python", "typescript"}) {
      Replay(env, origin, origins.at(origin));
    }
  } else {
    std::cerr << "crosslang_peer: unknown mode " << mode << "\n";
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
