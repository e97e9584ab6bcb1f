#include "dist/handshake.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "dist/hash.h"

namespace lynx::dist {
namespace {

// Fixed-size form of an Identity for MPI_Allgather (strings truncated).
struct Wire {
  char version[96];
  char host[96];
  char error[512];
  uint64_t model_hash, file_size, placement_hash;
};

void copy_str(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(n - 1, s.size()));
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

void model_identity(const std::string& path, uint64_t header_bytes, Identity& id) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + path);
  Fnv1a h;
  std::vector<char> buf(1 << 16);
  uint64_t left = header_bytes;
  while (left > 0) {
    const auto n = std::streamsize(std::min<uint64_t>(left, buf.size()));
    if (!f.read(buf.data(), n)) throw Error("cannot read the header of " + path);
    h.add(buf.data(), size_t(n));
    left -= uint64_t(n);
  }
  f.seekg(0, std::ios::end);
  id.model_hash = h.value();
  id.file_size = uint64_t(f.tellg());
}

void handshake(const Mpi& mpi, const Identity& mine) {
  Wire w{};
  copy_str(w.version, sizeof w.version, mine.version);
  copy_str(w.host, sizeof w.host, process_name());
  copy_str(w.error, sizeof w.error, mine.error);
  w.model_hash = mine.model_hash;
  w.file_size = mine.file_size;
  w.placement_hash = mine.placement_hash;
  const std::vector<Wire> all = mpi.allgather(w);
  // Load failures first: a rank without its shard explains any other difference.
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].error[0]) {
      throw CollectiveError("expert parallel: rank " + std::to_string(r) + " (" + all[r].host +
                            ") cannot load its shard: " + all[r].error);
    }
  }
  const Wire& ref = all[0];
  for (size_t r = 1; r < all.size(); ++r) {
    const Wire& o = all[r];
    const std::string who = "expert parallel: rank " + std::to_string(r) + " (" + o.host + ")";
    if (std::strcmp(o.version, ref.version) != 0) {
      throw CollectiveError(who + " runs build '" + o.version + "', rank 0 runs '" + ref.version +
                            "': every rank must run the same binary");
    }
    if (o.model_hash != ref.model_hash || o.file_size != ref.file_size) {
      throw CollectiveError(who + " loaded a different model (header hash " + hex(o.model_hash) +
                            ", " + std::to_string(o.file_size) + " bytes) than rank 0 (" +
                            hex(ref.model_hash) + ", " + std::to_string(ref.file_size) + " bytes)");
    }
    if (o.placement_hash != ref.placement_hash) {
      throw CollectiveError(who + " has a different expert placement than rank 0 (hash " +
                            hex(o.placement_hash) + " vs " + hex(ref.placement_hash) + ")");
    }
  }
}

}  // namespace lynx::dist
