// Memory while loading: a matrix the loader repacks into its own memory (kernels/weight_pack.h)
// must not stay resident in the file mapping too, or a model of every repacked type would
// take twice its file size (docs/benchmarks.md, "Memory while loading"). The probe is
// /proc/self/pagemap: its "present" bit says whether a page is mapped into this process, which
// is what the resident set counts (mincore() would not do: it reports the page cache, which
// keeps the file's pages after the process lets them go, and which the RSS does not count).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../scratch.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "lynx/context.h"
#include "lynx/gguf.h"
#include "lynx/model.h"
#include "lynx/synth.h"
#include "model/weights.h"

namespace lynx {
namespace {

using gguf::TensorType;
using kernels::WeightLayout;

// Pages wholly inside [p, p + n), and how many of them are mapped into this process.
struct Pages {
  size_t total = 0, present = 0;
};

class PageMap {
 public:
  PageMap() : fd_(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)) {}
  ~PageMap() {
    if (fd_ >= 0) ::close(fd_);
  }
  PageMap(const PageMap&) = delete;
  PageMap& operator=(const PageMap&) = delete;
  bool ok() const { return fd_ >= 0; }

  Pages pages(const uint8_t* p, size_t n) const {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t s = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    Pages out;
    for (uintptr_t a = s; a < e; a += page) {
      uint64_t entry = 0;
      const off_t at = off_t(a / page * sizeof(entry));
      if (::pread(fd_, &entry, sizeof(entry), at) != ssize_t(sizeof(entry))) {
        ADD_FAILURE() << "cannot read /proc/self/pagemap";
        return out;
      }
      ++out.total;
      out.present += (entry >> 63) & 1;  // bit 63: page present in this process
    }
    return out;
  }

 private:
  int fd_ = -1;
};

// A one-layer Qwen3-MoE-like model whose matrices are all `type` (256 columns everywhere, so
// the 256-element super-blocks of the K-quants and IQ4_XS fit every matrix; 8 experts of
// 256, a vocabulary of 512 so token_embd and output span several pages in every type). Small,
// as it is written and loaded 16 times on machines that may be busy.
std::string write_model(TensorType type) {
  SynthShape s = synth_shape("tiny-moe");
  s.arch = "qwen3moe";
  s.n_layer = 1;
  s.n_vocab = 512;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 256;
  SynthOptions o;
  o.shape = s;
  o.type = type;
  const std::string path =
      test::scratch_path(std::string("load_mem_") + gguf::tensor_type_name(type) + ".gguf");
  write_synth_model(o, path);
  return path;
}

// The matrices the model computes with, by the file tensor each was bound to: a load that
// keeps the file's layout points every weight at its tensor's bytes in the mapping.
std::vector<std::pair<std::string, const Weight*>> weights_by_tensor(const Model& plain,
                                                                     const Model& packed) {
  std::map<const uint8_t*, std::string> name;
  for (const gguf::TensorInfo& t : plain.file().tensors()) name[t.data] = t.name;
  std::vector<std::pair<std::string, const Weight*>> out;
  auto add = [&](const Weight& a, const Weight& b) {
    if (a.present()) out.emplace_back(name.at(a.data), &b);
  };
  for (int il = 0; il < plain.config().n_layer; ++il) {
    const LayerWeights& a = plain.layer(il);
    const LayerWeights& b = packed.layer(il);
    add(a.wq, b.wq);
    add(a.wk, b.wk);
    add(a.wv, b.wv);
    add(a.wo, b.wo);
    add(a.router, b.router);
    add(a.gate_exps, b.gate_exps);
    add(a.up_exps, b.up_exps);
    add(a.down_exps, b.down_exps);
  }
  add(plain.token_embd(), packed.token_embd());
  add(plain.output(), packed.output());
  return out;
}

// Every type the engine computes with: after a default load (read ahead, then repacked), no
// page that lies wholly inside a repacked matrix's file bytes is still mapped, while the
// matrices kept in the file's layout (token_embd) are; and the pages of the file mapping
// still resident add up to no more than the unrepacked tensors plus the pages two tensors
// share. So the file's share of the resident set after loading is what the model still reads
// from it, and the repacked copies are not counted twice.
TEST(LoadMemory, RepackedMatricesLeaveNoResidentPagesInTheFileMapping) {
  const PageMap pm;
  if (!pm.ok()) GTEST_SKIP() << "/proc/self/pagemap is not readable here";
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  int tested = 0;
  for (const kernels::TypeTraits& tr : kernels::all_type_traits()) {
    const TensorType type = tr.type;
    if (!kernels::is_compute_type(type) || type == TensorType::Q8_K) continue;
    SCOPED_TRACE(gguf::tensor_type_name(type));
    const std::string path = write_model(type);
    LoadOptions keep;
    keep.repack = keep.repack_float = keep.prefetch = false;
    auto plain = Model::load(path, keep);
    auto packed = Model::load(path);
    const gguf::File& f = packed->file();
    size_t repacked = 0, released_pages = 0, kept_present = 0;
    std::map<std::string, bool> moved;
    for (const auto& [name, w] : weights_by_tensor(*plain, *packed)) {
      const gguf::TensorInfo& t = f.tensor(name);
      moved[name] = w->layout != WeightLayout::kRows;
      const Pages p = pm.pages(t.data, t.n_bytes);
      if (moved[name]) {
        ++repacked;
        released_pages += p.total;
        EXPECT_EQ(p.present, 0u) << name << ": " << p.present << " of " << p.total
                                 << " pages of the repacked source still mapped";
      } else if (name == "token_embd.weight") {
        kept_present += p.present;
      }
    }
    // Q8_0/Q4_0 and the other block types move to kInterleaved16, F32/F16/BF16 to kPanel16:
    // the experts and the attention at least.
    EXPECT_GE(repacked, 7u);
    EXPECT_GT(released_pages, 0u);
    // The read-ahead mapped token_embd (rows, looked up by token): the probe sees pages that
    // are there. (Greater than zero, not all: the kernel may reclaim a clean page any time.)
    EXPECT_GT(kept_present, 0u);

    // The whole mapping from the first tensor's data to the last one's end.
    const gguf::TensorInfo* lo = &f.tensors().front();
    const gguf::TensorInfo* hi = lo;
    size_t unmoved = 0;
    for (const gguf::TensorInfo& t : f.tensors()) {
      if (t.data < lo->data) lo = &t;
      if (t.data + t.n_bytes > hi->data + hi->n_bytes) hi = &t;
      if (!moved.count(t.name) || !moved[t.name]) unmoved += t.n_bytes;
    }
    const Pages all = pm.pages(lo->data, size_t(hi->data + hi->n_bytes - lo->data));
    const size_t bound = unmoved + 2 * page * f.tensors().size();
    EXPECT_LE(all.present * page, bound)
        << all.present << " of " << all.total << " pages of the mapping resident";
    std::printf(
        "%-7s %zu repacked tensors, %zu of their pages released; mapping: %zu of %zu "
        "pages resident (%zu bytes not repacked)\n",
        gguf::tensor_type_name(type), repacked, released_pages, all.present, all.total, unmoved);
    std::remove(path.c_str());
    ++tested;
  }
  EXPECT_GE(tested, 15);
}

// Fused gate/up experts (ffn_gate_up_exps) through the expert tier: the loader does not copy
// the experts apart into the model (gate_exps / up_exps stay strided views of the file), and
// the tier reads them with pread, not through the mapping: after loading and a few steps,
// next to none of the fused tensors' pages is mapped into this process (a copy of every
// expert, as the load without the tier makes, maps them). The experts' share of memory is the
// tier's slots.
TEST(LoadMemory, FusedExpertsThroughTheTierAreNotCopied) {
  const PageMap pm;
  if (!pm.ok()) GTEST_SKIP() << "/proc/self/pagemap is not readable here";
  SynthShape s = synth_shape("tiny-gemma4");
  s.n_layer = 2;
  s.n_embd = 256;
  s.n_ff_exp = 256;  // fused: 512 rows of 512 bytes (F16) per expert, 4 MiB per layer
  SynthOptions o;
  o.shape = s;
  o.fused_gate_up = true;
  const std::string path = test::scratch_path("load_mem_fused.gguf");
  write_synth_model(o, path);
  for (const bool tier : {true, false}) {
    SCOPED_TRACE(tier ? "tier" : "loaded");
    LoadOptions lo;
    lo.expert_cache = tier ? int64_t(4) << 20 : 0;
    const auto m = Model::load(path, lo);
    ASSERT_EQ(m->expert_tier() != nullptr, tier);
    {
      ContextOptions co;
      co.n_ctx = 16;
      co.n_threads = 2;
      Context ctx(*m, co);
      const int32_t seq = ctx.new_sequence();
      for (int32_t i = 0; i < 4; ++i) {
        const std::vector<BatchToken> step = {{300 + i, seq, i, 0, true}};
        ctx.eval(step);
      }
    }
    size_t fused_pages = 0, present = 0;
    for (int il = 0; il < s.n_layer; ++il) {
      const gguf::TensorInfo& t =
          m->file().tensor("blk." + std::to_string(il) + ".ffn_gate_up_exps.weight");
      const Pages p = pm.pages(t.data, t.n_bytes);
      fused_pages += p.total;
      present += p.present;
      const Weight& g = m->layer(il).gate_exps;
      const bool in_file = g.data >= t.data && g.data < t.data + t.n_bytes;
      EXPECT_EQ(in_file, tier) << "layer " << il;
      EXPECT_EQ(g.mat_stride, tier ? 2 * g.mat_bytes : 0u);
    }
    ASSERT_GE(fused_pages, 2 * 1000u);
    if (tier) {
      // Touching a neighbouring tensor may map a few cached pages around it (the kernel's
      // fault-around, 64 KiB): at most 16 pages at each end of a tensor.
      EXPECT_LE(present, size_t(32 * s.n_layer))
          << present << " of " << fused_pages << " pages mapped";
    } else {
      EXPECT_GT(present, 0u);  // copied through the mapping (the kernel may reclaim some)
    }
    std::printf("%s: %zu of the fused tensors' %zu pages mapped\n", tier ? "tier" : "loaded",
                present, fused_pages);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace lynx
