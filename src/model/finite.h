// The engine's check for non-finite values in a step (docs/routing.md "Non-finite values in
// the engine"): NaN router weights, a NaN epsilon or an overflowing hidden state would
// otherwise flow through sampling as garbage text. Checked on rows the step has just written
// (router logits [T x N], the last hidden states [T x E], output logits [n_out x V]), while
// they are in cache: no pass over the weights.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/error.h"

namespace lynx {

// True when every value of row[0..n) is finite: an exponent of all ones is inf or NaN.
// Integer operations, so the loop vectorizes without -ffast-math.
inline bool row_is_finite(const float* row, size_t n) {
  uint32_t all_ones = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &row[i], sizeof bits);
    all_ones |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
  }
  return all_ones == 0;
}

// Throws NonFiniteError naming `what` (followed by " of layer N", or by " N" when `what`
// ends in "layer"; nothing when layer < 0) and the sequences of the bad rows. `rows` holds
// `n_rows` rows of `n` values; row r belongs to batch token token_of(r). Builds no string
// unless it throws.
template <class TokenOf>
void check_finite_rows(const float* rows, int n_rows, size_t n, std::span<const BatchToken> batch,
                       TokenOf token_of, const char* what, int layer = -1) {
  std::vector<int32_t> seqs;
  for (int r = 0; r < n_rows; ++r) {
    if (row_is_finite(rows + size_t(r) * n, n)) continue;
    const int32_t s = batch[size_t(token_of(r))].seq;
    bool seen = false;
    for (int32_t x : seqs) seen |= x == s;
    if (!seen) seqs.push_back(s);
  }
  if (seqs.empty()) return;
  std::string list;
  for (int32_t s : seqs) list += (list.empty() ? "" : ", ") + std::to_string(s);
  const std::string where = std::string(what) + (layer < 0 ? std::string()
                                                 : std::string_view(what).ends_with("layer")
                                                     ? " " + std::to_string(layer)
                                                     : " of layer " + std::to_string(layer));
  throw NonFiniteError("non-finite values (NaN or inf) in the " + where + " (sequence" +
                           (seqs.size() > 1 ? "s " : " ") + list +
                           "): the model's weights or metadata produce invalid numbers",
                       std::move(seqs));
}

}  // namespace lynx
