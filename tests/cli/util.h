// Runs the lynx-moe binary of this build, for the command-line tests.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace lynx::test {

struct CliRun {
  int status = -1;  // raw pclose status
  std::string out;  // stdout and stderr together
  // The exit code, or 128 + the signal that ended the process (as a shell reports it).
  int code() const {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
  }
};

// Runs `lynx-moe args` through the shell (stderr folded into stdout). `prefix` runs before it
// in the same shell (e.g. "ulimit -v 100000;").
inline CliRun run_cli(const std::string& args, const std::string& prefix = "") {
  const std::string cmd = prefix + std::string(LYNX_BINARY_DIR) + "/bin/lynx-moe " + args + " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = pclose(p);
  return r;
}

}  // namespace lynx::test
