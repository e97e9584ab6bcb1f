// The greedy weighted set cover that `cover` and `subst` grow the batch's expert set with
// (docs/routing.md, "cover", step 2). One implementation, so the two policies pick the same
// set from the same q.
#pragma once

#include <cstdint>
#include <vector>

namespace lynx::routing {

// Scratch of the greedy, kept by the policy between calls (no allocation per step once sized).
struct CoverGreedy {
  std::vector<float> best;  // per row, its up to k largest q within U, descending
  std::vector<int> n_best;

  // q: B rows of n values (row r's worth of each expert). in_u / n_u: the set U so far (the
  // confident prefixes), grown in place: the expert with the largest marginal gain (the sum
  // over rows of how much it raises the row's k best q within U; ties: lower id) joins while
  // its gain >= lambda, and regardless of lambda while U holds fewer than k experts. u gets
  // the experts of U in id order. cost [n] (RoutingInput::cost) or nullptr: with costs, the
  // expert with the largest gain per unit of cost joins, while gain / cost >= lambda.
  void grow(const float* q, int B, int n, int k, float lambda, const float* cost,
            std::vector<uint8_t>& in_u, int& n_u, std::vector<int32_t>& u);
};

}  // namespace lynx::routing
