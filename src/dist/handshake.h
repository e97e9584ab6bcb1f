// The start-up handshake of an expert-parallel job: every rank states what it runs (build,
// model identity, placement) and whether it loaded its shard; all ranks compare the lot, so
// a mismatch or a failed load gives the same clear error on every rank (CollectiveError) and
// no rank waits for ever in a later collective.
#pragma once
#include <cstdint>
#include <string>

#include "dist/comm.h"

namespace lynx::dist {

struct Identity {
  std::string version;      // build (version and commit)
  uint64_t model_hash = 0;  // FNV-1a of the GGUF header (metadata + tensor table)
  uint64_t file_size = 0;
  uint64_t placement_hash = 0;
  std::string error;  // non-empty: this rank could not load its shard (the reason)
};

// Model identity of a GGUF file: FNV-1a over its first `header_bytes` bytes (the metadata
// and the tensor table: everything but the tensor data) and its size. Throws lynx::Error
// when the file cannot be read.
void model_identity(const std::string& path, uint64_t header_bytes, Identity& id);

// Compares every rank's identity with rank 0's; throws CollectiveError on every rank naming
// the first rank that failed to load or differs, and what differs.
void handshake(const Mpi& mpi, const Identity& mine);

}  // namespace lynx::dist
