#include "server/ready_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dedup {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ReadyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ready_file_test." + std::to_string(getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "ready.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::string path_;
};

ReadyInfo Sample() {
  ReadyInfo info;
  info.pid = 4242;
  info.mode = "cluster";
  info.node_id = 2;
  info.address = "127.0.0.2:40001";
  info.metrics_address = "127.0.0.2:40002";
  info.raft_address = "127.0.0.2:40003";
  info.data_dir = "/tmp/d \"quoted\"";
  info.durability = "raft";
  info.tls = "mtls";
  info.auth = "tenants";
  info.version = "0.1.0";
  info.data_format = 7;
  return info;
}

TEST_F(ReadyFileTest, WritesOneLineOfJsonWithEveryField) {
  ASSERT_TRUE(WriteReadyFile(path_, Sample()).ok());
  const std::string text = ReadAll(path_);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.find('\n'), text.size() - 1) << text;
  const nlohmann::json json = nlohmann::json::parse(text);
  EXPECT_EQ(json["pid"], 4242);
  EXPECT_EQ(json["mode"], "cluster");
  EXPECT_EQ(json["node_id"], 2);
  EXPECT_EQ(json["address"], "127.0.0.2:40001");
  EXPECT_EQ(json["metrics_address"], "127.0.0.2:40002");
  EXPECT_EQ(json["health_address"], "");
  EXPECT_EQ(json["raft_address"], "127.0.0.2:40003");
  EXPECT_EQ(json["data_dir"], "/tmp/d \"quoted\"");
  EXPECT_EQ(json["durability"], "raft");
  EXPECT_EQ(json["tls"], "mtls");
  EXPECT_EQ(json["auth"], "tenants");
  EXPECT_EQ(json["version"], "0.1.0");
  EXPECT_EQ(json["data_format"], 7);
}

TEST_F(ReadyFileTest, ReplacesAnOldFileAndLeavesNoTempFile) {
  {
    std::ofstream old(path_);
    old << "{\"pid\": 1, \"address\": \"stale\"}\n";
  }
  ASSERT_TRUE(WriteReadyFile(path_, Sample()).ok());
  EXPECT_EQ(nlohmann::json::parse(ReadAll(path_))["address"],
            "127.0.0.2:40001");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(ReadyFileTest, FailsWithThePathWhenTheDirectoryIsMissing) {
  const std::string missing = (dir_ / "no" / "such" / "ready.json").string();
  const absl::Status s = WriteReadyFile(missing, Sample());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--ready_file"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find(missing), absl::string_view::npos) << s;
}

TEST_F(ReadyFileTest, RemovesOnlyItsOwnFile) {
  ASSERT_TRUE(WriteReadyFile(path_, Sample()).ok());
  RemoveReadyFile(path_, 1111);  // another process's: kept
  EXPECT_TRUE(std::filesystem::exists(path_));
  RemoveReadyFile(path_, 4242);
  EXPECT_FALSE(std::filesystem::exists(path_));
  RemoveReadyFile(path_, 4242);  // gone already: no error, no crash
}

}  // namespace
}  // namespace dedup
