// Reading a whole input file with a bound (internal; header-only, no library of its own).
//
// Every file a user names (prompts, keys, configs, similarity tables, placements, imatrix) is
// read through here: it must be a regular file no larger than the caller's bound, so that
// /dev/zero, a FIFO, /dev/stdin or a socket gives a clear error instead of a read that never
// ends or takes all memory.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "lynx/error.h"

namespace lynx::util {

inline constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

// "1.5 MiB" style size for messages.
inline std::string byte_size(uint64_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// The contents of `path`; `what` names the input in errors ("--prompt-file", "imatrix file").
// Throws lynx::Error when the path cannot be opened, is not a regular file, or holds more
// than `max_bytes` (checked while reading too, for a file that grows).
inline std::string read_file_bounded(const std::string& path, uint64_t max_bytes,
                                     const std::string& what) {
  // O_NONBLOCK: opening a FIFO with no writer must not wait; it is refused just below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw Error(what + ": cannot open '" + path + "': " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw Error(what + ": cannot stat '" + path + "': " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw Error(what + ": '" + path + "' is a directory, not a file");
  if (!S_ISREG(st.st_mode)) {
    throw Error(what + ": '" + path +
                "' is not a regular file (pipes, devices and sockets are not read)");
  }
  const auto too_big = [&] {
    return Error(what + ": '" + path + "' is larger than the limit of " + byte_size(max_bytes));
  };
  if (uint64_t(st.st_size) > max_bytes) throw too_big();
  std::string out;
  out.resize(size_t(st.st_size));
  size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      if (have >= max_bytes + 1) throw too_big();
      out.resize(size_t(std::min<uint64_t>(max_bytes + 1, have + 64 * kKiB)));
    }
    const ssize_t n = ::read(fd, out.data() + have, out.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(what + ": cannot read '" + path + "': " + std::strerror(errno));
    }
    if (n == 0) break;
    have += size_t(n);
  }
  if (have > max_bytes) throw too_big();
  out.resize(have);
  return out;
}

}  // namespace lynx::util
