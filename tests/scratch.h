// A file name under the build tree that no other test process uses. ctest runs each test as
// its own process, in parallel, so two tests writing one fixed name race (a reader sees the
// other test's file); the test's full name and the process id keep them apart.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace lynx::test {

inline std::string scratch_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  for (char& c : test) {
    if (c == '/') c = '_';  // parameterised tests
  }
  const std::filesystem::path dir = std::filesystem::path(LYNX_BINARY_DIR) / "scratch";
  std::filesystem::create_directories(dir);
  return (dir / (test + "-" + std::to_string(::getpid()) + "-" + name)).string();
}

}  // namespace lynx::test
