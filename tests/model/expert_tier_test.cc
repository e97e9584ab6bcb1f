// The expert tier (src/model/expert_tier.h): a model whose routed experts are read into a
// bounded pool of slots computes the logits of the fully loaded model bit for bit, at every
// pool size down to one slot, in prefill, decode and batched steps, on every MoE fixture of
// tests/reference (each family and weight type), in both activation modes; reads that fail
// fail the step with a clear error and leave the model usable; two contexts share a tier.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "../scratch.h"
#include "lynx/context.h"
#include "lynx/error.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/expert_tier.h"
#include "model/memory_budget.h"
#include "model/tiered_expert_executor.h"
#include "model/weights.h"
#include "tier_test_util.h"

namespace lynx {
namespace {

using namespace tier_test;

TEST(ExpertTier, LogitsBitIdenticalAtEveryPoolSize) {
  const auto fixtures = moe_fixtures();
  ASSERT_GE(fixtures.size(), 8u);
  for (const MoeFixture& fx : fixtures) {
    SCOPED_TRACE(fx.name);
    const auto full = Model::load(fx.file, resident());
    ASSERT_EQ(full->expert_tier(), nullptr);
    const int n_exp = full->config().n_expert;
    for (const bool exact : {false, true}) {
      const std::vector<float> want = run(*full, fx.tokens, exact);
      for (const int slots : {1, 3, n_exp * full->config().n_layer}) {
        SCOPED_TRACE("slots " + std::to_string(slots) + (exact ? " exact" : " int"));
        const auto tiered = Model::load(fx.file, tier_of(*full, slots));
        ASSERT_NE(tiered->expert_tier(), nullptr);
        EXPECT_TRUE(same_bits(run(*tiered, fx.tokens, exact), want));
        const ExpertTierStats s = tiered->expert_tier()->stats();
        EXPECT_EQ(s.slots, std::min(slots, n_exp * full->config().n_layer));
        EXPECT_GT(s.misses, 0u);
        EXPECT_EQ(s.read_errors, 0u);
        if (slots == 1) {
          EXPECT_GT(s.evictions, 0u);
        }
      }
    }
  }
}

// Experts whose gate and up are fused in one tensor (ffn_gate_up_exps: per expert its F gate
// rows, then its F up rows, as llama.cpp's gemma4 converter writes them): the tier reads each
// expert's two halves from the file (an expert every 2F rows) into its slot, laid out as the
// loader lays out the copies it splits off without the tier. Logits bit-identical to the fully
// loaded model at every pool size down to one slot, with and without the read-ahead, in both
// activation modes, for weight types of different row sizes (tiny-gemma4: 4 layers of 16
// experts, 64 x 32, written by synth).
TEST(ExpertTier, FusedGateUpExpertsBitIdentical) {
  const std::vector<int32_t> toks = {3, 77, 501, 12, 260, 9, 140, 33, 480, 5, 301, 64};
  for (const gguf::TensorType type :
       {gguf::TensorType::F16, gguf::TensorType::BF16, gguf::TensorType::Q8_0}) {
    SCOPED_TRACE(gguf::tensor_type_name(type));
    SynthOptions so;
    so.shape = synth_shape("tiny-gemma4");
    so.type = type;
    so.fused_gate_up = true;
    const std::string path =
        test::scratch_path(std::string("tier_fused_") + gguf::tensor_type_name(type) + ".gguf");
    write_synth_model(so, path);
    ASSERT_NE(gguf::File::open(path).find_tensor("blk.0.ffn_gate_up_exps.weight"), nullptr);
    const auto full = Model::load(path, resident());
    ASSERT_EQ(full->expert_tier(), nullptr);
    ASSERT_TRUE(full->layer(0).gate_up_fused);
    EXPECT_EQ(full->layer(0).gate_exps.mat_stride, 0u);  // copied apart
    const std::vector<float> want[2] = {run(*full, toks, false), run(*full, toks, true)};
    const int all = full->config().n_expert * full->config().n_layer;
    for (const int slots : {1, 3, all}) {
      for (const int prefetch : {0, 2}) {
        SCOPED_TRACE("slots " + std::to_string(slots) + " prefetch " + std::to_string(prefetch));
        LoadOptions o = tier_of(*full, slots);
        o.expert_prefetch = prefetch;
        const auto tiered = Model::load(path, o);
        ASSERT_NE(tiered->expert_tier(), nullptr);
        // Views of the file's halves, not copies.
        const Weight& g = tiered->layer(0).gate_exps;
        EXPECT_EQ(g.mat_stride, 2 * g.mat_bytes);
        EXPECT_EQ(tiered->layer(0).up_exps.data, g.data + g.mat_bytes);
        EXPECT_NE(tiered->expert_tier_summary().find("fused"), std::string::npos);
        for (const bool exact : {false, true}) {
          EXPECT_TRUE(same_bits(run(*tiered, toks, exact), want[exact])) << "exact " << exact;
        }
        const ExpertTierStats s = tiered->expert_tier()->stats();
        EXPECT_EQ(s.slots, slots);
        EXPECT_GT(s.misses, 0u);
        EXPECT_EQ(s.read_errors, 0u);
        if (slots == 1) {
          EXPECT_GT(s.evictions, 0u);
        }
        // The read-ahead predicts gemma4's next router too (into slots no step holds).
        if (prefetch > 0 && slots == all) {
          EXPECT_GT(s.prefetches, 0u);
        }
      }
    }
    // The default (no --expert-cache): on when the file does not fit the budget.
    LoadOptions small;
    small.mem_budget = std::filesystem::file_size(path) / 2;
    const auto dflt = Model::load(path, small);
    ASSERT_NE(dflt->expert_tier(), nullptr);
    EXPECT_TRUE(same_bits(run(*dflt, toks, false), want[0]));
    std::remove(path.c_str());
  }
}

// (Without the prefetch, which reads its guesses of experts no step has used yet.)
TEST(ExpertTier, ResidentExpertsAreNotReadAgain) {
  const MoeFixture fx = moe_fixtures().front();
  const auto full = Model::load(fx.file, resident());
  LoadOptions o = tier_of(*full, 1 << 20);
  o.expert_prefetch = 0;
  const auto m = Model::load(fx.file, o);
  run(*m, fx.tokens, false);
  const ExpertTierStats first = m->expert_tier()->stats();
  run(*m, fx.tokens, false);
  const ExpertTierStats second = m->expert_tier()->stats();
  EXPECT_EQ(second.misses, first.misses);  // every expert used the first time is still there
  EXPECT_EQ(second.bytes_read, first.bytes_read);
  EXPECT_GT(second.hits, first.hits);
  EXPECT_EQ(second.evictions, 0u);
}

// RoutingInput::cost from the tier: 1 for an expert in a slot, the miss cost for the others,
// as of the residency snapshot the routing gets. With a miss cost of 1 every expert costs the
// same, and cover (which reads only the costs) routes as on the fully loaded model, bit for bit.
TEST(ExpertTier, RoutingSeesTheMissCost) {
  const MoeFixture fx = moe_fixtures().front();
  const auto full = Model::load(fx.file, resident());
  LoadOptions o = tier_of(*full, 3);
  o.expert_miss_cost = 7.f;
  const auto m = Model::load(fx.file, o);
  run(*m, fx.tokens, false);
  kernels::ThreadPool pool(1);
  TieredExpertExecutor ex(*m->expert_tier(), *m, pool, true);
  int seen_resident = 0, seen_missing = 0;
  for (int il = 0; il < m->config().n_layer; ++il) {
    if (!m->config().layer_routed(il)) continue;
    const uint8_t* r = ex.resident(il);
    const float* c = ex.cost(il);
    for (int e = 0; e < m->config().n_expert; ++e) {
      EXPECT_EQ(c[e], r[e] ? 1.f : 7.f) << il << " " << e;
      (r[e] ? seen_resident : seen_missing)++;
    }
  }
  EXPECT_GT(seen_resident, 0);
  EXPECT_GT(seen_missing, 0);

  const std::string cover = "cover:tau=0.3,lambda=0.2";
  LoadOptions flat = tier_of(*full, 3);
  flat.expert_miss_cost = 1.f;
  const std::vector<float> loaded = run(*full, fx.tokens, false, cover);
  EXPECT_FALSE(same_bits(loaded, run(*full, fx.tokens, false)));  // cover does remap here
  EXPECT_TRUE(same_bits(run(*Model::load(fx.file, flat), fx.tokens, false, cover), loaded));
  // A high miss cost moves choices elsewhere than the loaded model's cover.
  LoadOptions steep = tier_of(*full, 3);
  steep.expert_miss_cost = 1000.f;
  EXPECT_FALSE(same_bits(run(*Model::load(fx.file, steep), fx.tokens, false, cover), loaded));
  LoadOptions bad = tier_of(*full, 3);
  bad.expert_miss_cost = 0.5f;
  EXPECT_THROW(Model::load(fx.file, bad), Error);
}

// A reader that fails while `fail` is set: the step throws an error naming the tier, the
// expert and the read's message, no slot keeps the failed expert (nor one whose read failed
// after the step had gone), and once reads work again a new sequence gets the loaded
// model's logits.
TEST(ExpertTier, FailedReadsFailTheStepOnly) {
  const MoeFixture fx = moe_fixtures().front();
  const auto full = Model::load(fx.file, resident());
  const std::vector<float> want = run(*full, fx.tokens, false);
  LoadOptions o = tier_of(*full, 2);
  std::atomic<bool> fail{false};
  const int fd = ::open(fx.file.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  o.expert_read = [&](uint64_t off, size_t n, uint8_t* dst) {
    if (fail) {
      // Slow failures: the step fails on the first while the others are still being read,
      // and those fail after the step has gone.
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      throw Error("injected EIO");
    }
    if (::pread(fd, dst, n, off_t(off)) != ssize_t(n)) throw Error("short read");
  };
  const auto m = Model::load(fx.file, o);
  fail = true;
  try {
    run(*m, fx.tokens, false);
    ADD_FAILURE() << "the step did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert tier: reading expert"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("injected EIO"), std::string::npos) << e.what();
  }
  EXPECT_GT(m->expert_tier()->stats().read_errors, 0u);
  EXPECT_EQ(m->expert_tier()->stats().resident, 0);
  fail = false;
  EXPECT_TRUE(same_bits(run(*m, fx.tokens, false), want));
  ::close(fd);
}

// ExpertTier::prefetch by hand: reads what is asked, up to max_reads, into empty slots and
// never over a kept expert; a claim then finds the experts (hits, counted as prefetch hits).
TEST(ExpertTier, PrefetchFillsSpareSlotsOnly) {
  const MoeFixture fx = moe_fixtures().front();
  const auto full = Model::load(fx.file, resident());
  LoadOptions o = tier_of(*full, 4);
  o.expert_prefetch = 0;  // only the calls below prefetch
  const auto m = Model::load(fx.file, o);
  ExpertTier& tier = *m->expert_tier();
  int il = 0;
  while (!m->config().layer_routed(il)) ++il;
  ASSERT_GE(m->config().n_expert, 8);
  // Two of four slots read ahead: 0 and 1 (2 and 3 are over max_reads).
  const std::vector<int32_t> guess = {0, 1, 2, 3};
  EXPECT_EQ(tier.prefetch(il, guess, 2), 2);
  std::vector<int32_t> want = {0, 1};
  std::vector<ExpertTier::Claim> claims;
  tier.claim(il, want, claims);
  ASSERT_EQ(claims.size(), 2u);
  for (const auto& c : claims) tier.wait(c);
  ExpertTierStats s = tier.stats();
  EXPECT_EQ(s.prefetches, 2u);
  EXPECT_EQ(s.prefetch_hits, 2u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 0u);
  // Already resident: nothing to read.
  EXPECT_EQ(tier.prefetch(il, want, 4), 0);
  tier.release(claims);
  // The two other slots taken by claims (kept experts): a prefetch now may only replace the
  // transient slots of 0 and 1, never 6 and 7.
  claims.clear();
  want = {6, 7};
  tier.claim(il, want, claims);
  for (const auto& c : claims) tier.wait(c);
  tier.release(claims);
  const std::vector<int32_t> more = {4, 5, 2};
  EXPECT_EQ(tier.prefetch(il, more, 3), 2);
  std::vector<uint8_t> res;
  tier.resident(il, res);
  EXPECT_EQ(std::vector<uint8_t>(res.begin(), res.begin() + 8),
            (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(tier.stats().prefetches, 4u);
  // A layer without routed experts, or an expert out of range: nothing, no throw.
  EXPECT_EQ(tier.prefetch(-1, more, 2), 0);
  const std::vector<int32_t> bad = {-1, 1 << 20};
  EXPECT_EQ(tier.prefetch(il, bad, 2), 0);
}

// On the bundled model (a trained router): the prefetch reads ahead while decoding, the logits
// are the same bits as without it, and its guesses are far better than chance (k of N per
// token): the next layer's router on this layer's input ranks that layer's experts.
TEST(ExpertTier, PrefetchPredictsTheNextLayerOfATrainedModel) {
  const std::string path = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-64x8.gguf";
  const auto full = Model::load(path, resident());
  const std::vector<int32_t> toks = {300, 1200, 45, 877, 2048, 15, 999, 3000, 64, 1500,
                                     7,   2222, 31, 640, 1800, 90, 420, 2600, 11, 3500};
  LoadOptions on = tier_of(*full, 96), off = on;  // 96 of 256 experts
  on.expert_prefetch = 4;
  off.expert_prefetch = 0;
  const auto a = Model::load(path, on);
  const auto b = Model::load(path, off);
  const std::vector<float> la = run(*a, toks, false), lb = run(*b, toks, false);
  EXPECT_TRUE(same_bits(la, lb));
  EXPECT_TRUE(same_bits(la, run(*full, toks, false)));
  const ExpertTierStats s = a->expert_tier()->stats();
  EXPECT_EQ(b->expert_tier()->stats().prefetches, 0u);
  ASSERT_GT(s.prefetches, 0u);
  const double accuracy = double(s.prefetch_hits) / double(s.prefetches);
  const double chance = double(full->config().n_expert_used) / full->config().n_expert;
  EXPECT_GT(accuracy, 2 * chance) << s.prefetch_hits << " of " << s.prefetches;
  std::printf("prefetch: %llu reads, %llu claimed (%.1f%%; chance %.1f%%)\n",
              (unsigned long long)s.prefetches, (unsigned long long)s.prefetch_hits, 100 * accuracy,
              100 * chance);
}

// By default the tier is on exactly when the file does not fit the budget.
// Pinning (LoadOptions::expert_pin_uses): each routed layer's most used experts, up to the
// share of the slots, are read at load into slots that are never evicted; the other slots
// churn as before, and the logits stay the fully loaded model's bits.
TEST(ExpertTier, PinnedExpertsStayResident) {
  const std::string path = std::string(LYNX_SOURCE_DIR) + "/models/lynx-moe-64x8.gguf";
  const auto full = Model::load(path, resident());
  const ModelConfig& c = full->config();
  int routed = 0;
  for (int il = 0; il < c.n_layer; ++il) routed += c.layer_routed(il);
  ASSERT_GT(routed, 0);
  // 4 slots per routed layer, half of them pinned: experts 40 and 9 of each layer (the most
  // used, then the next; the others used less or never).
  LoadOptions o = tier_of(*full, 4 * routed);
  o.expert_prefetch = 0;
  o.expert_pin_share = 0.5f;
  o.expert_pin_uses = [](const ModelConfig& m) {
    std::vector<std::vector<uint32_t>> u(size_t(m.n_layer));
    for (int il = 0; il < m.n_layer; ++il) {
      if (!m.layer_routed(il)) continue;
      u[size_t(il)].assign(size_t(m.n_expert), 0);
      u[size_t(il)][40] = 9;
      u[size_t(il)][9] = 7;
      u[size_t(il)][20] = 3;
    }
    return u;
  };
  const auto m = Model::load(path, o);
  ExpertTier& tier = *m->expert_tier();
  ExpertTierStats s = tier.stats();
  EXPECT_EQ(s.pinned, 2 * routed);
  EXPECT_GT(s.pin_bytes, 0u);
  EXPECT_EQ(s.bytes_read, 0u);  // load reads are counted apart from the steps'
  EXPECT_EQ(s.misses, 0u);
  EXPECT_NE(m->expert_tier_summary().find(std::to_string(2 * routed) + " experts pinned"),
            std::string::npos)
      << m->expert_tier_summary();
  auto pinned_resident = [&] {
    std::vector<uint8_t> res;
    for (int il = 0; il < c.n_layer; ++il) {
      if (!c.layer_routed(il)) continue;
      tier.resident(il, res);
      if (!res[40] || !res[9] || res[20]) return false;
    }
    return true;
  };
  EXPECT_TRUE(pinned_resident());
  const std::vector<int32_t> toks = {300, 1200, 45, 877, 2048, 15, 999, 3000, 64, 1500,
                                     7,   2222, 31, 640, 1800, 90, 420, 2600, 11, 3500};
  for (const bool exact : {false, true}) {
    EXPECT_TRUE(same_bits(run(*m, toks, exact), run(*full, toks, exact)));
  }
  s = tier.stats();
  EXPECT_GT(s.evictions, 100u);  // the unpinned slots churned
  EXPECT_TRUE(pinned_resident());
  EXPECT_EQ(s.pinned, 2 * routed);
  EXPECT_EQ(s.read_errors, 0u);
}

// Uses that do not fit the model, or a share out of range, fail the load with a message.
TEST(ExpertTier, PinUsesThatDoNotFitAreRefused) {
  const MoeFixture fx = moe_fixtures().front();
  const auto full = Model::load(fx.file, resident());
  auto message = [&](const LoadOptions& o) {
    try {
      Model::load(fx.file, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  LoadOptions o = tier_of(*full, 8);
  o.expert_pin_uses = [](const ModelConfig& m) {
    std::vector<std::vector<uint32_t>> u(size_t(m.n_layer));
    for (int il = 0; il < m.n_layer; ++il) {
      if (m.layer_routed(il)) u[size_t(il)].assign(size_t(m.n_expert) + 1, 1);
    }
    return u;
  };
  EXPECT_NE(message(o).find("uses of " + std::to_string(full->config().n_expert + 1) +
                            " experts, the model " + std::to_string(full->config().n_expert)),
            std::string::npos)
      << message(o);
  o.expert_pin_uses = [](const ModelConfig&) -> std::vector<std::vector<uint32_t>> {
    throw Error("routing trace 'x' records 3 experts per layer");
  };
  EXPECT_NE(message(o).find("records 3 experts"), std::string::npos);
  o.expert_pin_share = 1.5f;
  EXPECT_NE(message(o).find("pin share"), std::string::npos) << message(o);
}

TEST(ExpertTier, OnWhenTheFileDoesNotFitTheBudget) {
  const MoeFixture fx = moe_fixtures().front();
  const size_t size = std::filesystem::file_size(fx.file);
  LoadOptions small;
  small.mem_budget = size / 2;  // the reserve alone (512 MiB) is larger: the minimum pool
  const auto a = Model::load(fx.file, small);
  ASSERT_NE(a->expert_tier(), nullptr);
  EXPECT_GE(a->expert_tier()->n_slots(), a->config().n_expert_used);
  EXPECT_NE(a->expert_tier_summary().find("does not fit"), std::string::npos)
      << a->expert_tier_summary();
  LoadOptions big;
  big.mem_budget = size + (size_t(1) << 30);
  const auto b = Model::load(fx.file, big);
  EXPECT_EQ(b->expert_tier(), nullptr);
  EXPECT_NE(b->expert_tier_summary().find("fits"), std::string::npos);
}

TEST(MemorySize, Parses) {
  EXPECT_EQ(parse_memory_size("1024"), 1024u);
  EXPECT_EQ(parse_memory_size("2K"), 2048u);
  EXPECT_EQ(parse_memory_size("512M"), size_t(512) << 20);
  EXPECT_EQ(parse_memory_size("1.5GiB"), size_t(3) << 29);
  EXPECT_EQ(parse_memory_size("24g"), size_t(24) << 30);
  EXPECT_THROW(parse_memory_size("lots"), Error);
  EXPECT_THROW(parse_memory_size("12X"), Error);
  EXPECT_THROW(parse_memory_size("-1G"), Error);
  EXPECT_GT(detect_memory_budget().bytes, 0u);
}

}  // namespace
}  // namespace lynx
