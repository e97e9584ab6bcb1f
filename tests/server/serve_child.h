// A `lynx-moe serve` child process for the server tests that drive the real binary.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "util.h"

namespace lynx::test {

inline const std::string kServeBinary = std::string(LYNX_BINARY_DIR) + "/bin/lynx-moe";

// `lynx-moe ARGS` (a `serve` with `--port 0`) as a child process with its stderr on a pipe;
// the port is read from its "listening on" line. env_key, when set, is its LYNX_API_KEY.
struct ServeChild {
  pid_t pid = -1;
  int err = -1;
  std::string log;
  int port = -1;

  explicit ServeChild(const std::vector<std::string>& args, const std::string& env_key = "") {
    int p[2];
    if (pipe(p) != 0) return;
    pid = fork();
    if (pid == 0) {
      dup2(p[1], 2);
      close(p[0]);
      if (!env_key.empty()) setenv("LYNX_API_KEY", env_key.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(kServeBinary.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(kServeBinary.c_str(), argv.data());
      _exit(127);
    }
    close(p[1]);
    err = p[0];
    fcntl(err, F_SETFL, O_NONBLOCK);
    // The port is in the "listening on http://127.0.0.1:PORT" line.
    eventually(
        [&] {
          pump();
          const size_t at = log.find("listening on http://127.0.0.1:");
          if (at == std::string::npos) return false;
          port = std::atoi(log.c_str() + at + 30);
          return true;
        },
        60000);
  }
  void pump() {
    char buf[4096];
    ssize_t n;
    while ((n = read(err, buf, sizeof buf)) > 0) log.append(buf, size_t(n));
  }
  // Exit status once it has exited within `ms`, -1 otherwise.
  int wait_exit(int ms) {
    int st = 0;
    for (int waited = 0; waited < ms; waited += 20) {
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        pump();
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  ~ServeChild() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (err >= 0) close(err);
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    return c;
  }
};

}  // namespace lynx::test
