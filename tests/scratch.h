// A file name under the build tree that no other test process uses. ctest runs each test as
// its own process, in parallel, so two tests writing one fixed name race (a reader sees the
// other test's file); the test's full name and the process id keep them apart.
//
// Every name handed out is removed when the test process exits: the suite writes ~1 GB of model
// files per run, and CI machines have run out of disk on leftovers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace lynx::test {

namespace detail {
// Removes the registered paths (files, or directories a test made under that name) at exit.
class ScratchRegistry {
 public:
  void add(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    paths_.push_back(path);
  }
  ~ScratchRegistry() {
    for (const auto& p : paths_) {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::string> paths_;
};

inline ScratchRegistry& scratch_registry() {
  static ScratchRegistry registry;
  return registry;
}
}  // namespace detail

inline std::string scratch_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  for (char& c : test) {
    if (c == '/') c = '_';  // parameterised tests
  }
  const std::filesystem::path dir = std::filesystem::path(LYNX_BINARY_DIR) / "scratch";
  std::filesystem::create_directories(dir);
  std::string path = (dir / (test + "-" + std::to_string(::getpid()) + "-" + name)).string();
  detail::scratch_registry().add(path);
  return path;
}

}  // namespace lynx::test
