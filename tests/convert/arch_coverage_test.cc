// The convert tables (src/convert/families.cc) against the architecture descriptions
// (src/model/arch): in every kind of layer a family can have (dense, MoE, MoE with a shared
// expert, q through a low rank or not, MLA's kv_b whole or split, q/k norms or not, a NextN
// layer), every tensor the architecture declares there has a rule that writes it or is declared
// absent by the family (Family::absent, with the reason), and every rule that applies writes a
// tensor the architecture declares there. A table that misses a tensor writes a file the loader
// refuses (or, for an optional tensor, a model that runs without it); one that writes a stray
// name writes a file llama.cpp does not read as intended.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "convert/family.h"
#include "model/arch/arch.h"

namespace lynx::convert {
namespace {

struct Situation {
  LayerFacts facts;
  LayerKind kind;
  ModelConfig cfg;
  std::string label;
};

bool key_required(const Family& f, const char* hf) {
  for (const auto& group : f.keys) {
    for (const KeyRule& k : group) {
      if (std::string(k.hf) == hf && k.required) return true;
    }
  }
  return false;
}

bool some_group_needs(const arch::ArchDesc& a, arch::Dim d) {
  for (auto groups :
       {a.blocks.attn_gqa, a.blocks.attn_mla, a.blocks.ffn_dense, a.blocks.ffn_moe, a.nextn}) {
    for (const arch::TensorGroup& g : groups) {
      if (g.need == d) return true;
    }
  }
  return false;
}

// Every combination of what a family's layers can be. A dense layer exists when the family has
// no experts, its expert count is optional (Llama / Mixtral) or it places dense layers
// (moe_layer); a MoE layer without a shared expert when the shared-expert field is optional.
std::vector<Situation> situations(const Family& f, const arch::ArchDesc& a) {
  enum Ffn { kDense, kMoe, kShared };
  std::vector<Ffn> ffns;
  if (!f.n_expert_key || f.moe_layer || !key_required(f, f.n_expert_key)) ffns.push_back(kDense);
  if (f.n_expert_key && (!f.shared_key || !key_required(f, f.shared_key))) ffns.push_back(kMoe);
  if (f.n_expert_key && f.shared_key) ffns.push_back(kShared);
  const bool mla = !a.blocks.attn_mla.empty();
  const std::vector<bool> no = {false}, both = {false, true};
  const std::vector<bool> qk_norms = some_group_needs(a, arch::Dim::kQkNorm)
                                         ? both
                                         : std::vector<bool>{a.qk_norm != QKNorm::kNone};
  std::vector<Situation> out;
  for (Ffn ffn : ffns) {
    for (bool q_lora : mla ? both : no) {
      for (bool split : mla ? both : no) {
        for (bool qk_norm : qk_norms) {
          for (bool nextn : f.nextn_key ? both : no) {
            Situation s;
            s.facts = {.moe = ffn != kDense,
                       .shared = ffn == kShared,
                       .q_lora = q_lora,
                       .mla_split = split,
                       .qk_norm = qk_norm,
                       .nextn = nextn};
            s.kind.attn = mla ? AttnKind::kMla : AttnKind::kGqa;
            s.kind.ffn = ffn == kDense ? FfnKind::kDense
                         : ffn == kMoe ? FfnKind::kMoe
                                       : FfnKind::kMoeShared;
            ModelConfig& c = s.cfg;
            c.n_embd = 64, c.n_head = 4, c.n_head_kv = 4, c.head_dim = 16, c.n_vocab = 100;
            c.n_ff = 96, c.n_ff_exp = 32, c.n_expert = ffn == kDense ? 0 : 8;
            c.n_ff_shexp = ffn == kShared ? 32 : 0;
            c.q_lora_rank = q_lora ? 24 : 0;
            c.qk_norm = !qk_norm                     ? QKNorm::kNone
                        : a.qk_norm != QKNorm::kNone ? a.qk_norm
                                                     : QKNorm::kPerHead;
            c.gating.select_bias = true;  // the converted families' checkpoints have it
            s.label = std::string(ffn == kDense ? "dense"
                                  : ffn == kMoe ? "MoE"
                                                : "MoE+shared") +
                      (mla ? q_lora ? ", q lora" : ", q direct" : "") +
                      (mla ? split ? ", kv_b split" : ", kv_b whole" : "") +
                      (qk_norm ? ", q/k norm" : "") + (nextn ? ", NextN layer" : "");
            out.push_back(std::move(s));
          }
        }
      }
    }
  }
  return out;
}

// What the architecture declares in one kind of layer: `must` (the layer has them), `may`
// (an alternative layout or optional tensor: some layer of the family should have it), and
// `allowed` (both).
struct Declared {
  std::set<std::string> must, may, allowed;
};

Declared declared(const arch::ArchDesc& a, const Situation& s) {
  Declared d;
  const std::span<const arch::TensorGroup> parts[] = {
      arch::attn_groups(a, s.kind), arch::ffn_groups(a, s.kind),
      s.facts.nextn ? a.nextn : std::span<const arch::TensorGroup>{}};
  for (const auto& groups : parts) {
    for (const arch::TensorGroup& g : groups) {
      if (!arch::group_applies(s.cfg, g)) continue;
      const bool sized = g.infer != arch::Dim::kOne;
      if (g.optional && sized && arch::dim(s.cfg, g.infer) <= 0) continue;
      for (const arch::TensorSpec& t : g.tensors) {
        const bool must = (!g.optional || sized) && t.required;
        (must ? d.must : d.may).insert(t.name);
        d.allowed.insert(t.name);
      }
    }
  }
  return d;
}

// The problems of one family, one line each (empty: none).
std::vector<std::string> check(const Family& f) {
  const arch::ArchDesc& a = arch::find(f.arch);
  std::vector<std::string> bad;
  const std::string who = std::string(f.model_type) + " (" + f.arch + "): ";
  std::map<std::string, const char*> absent;
  for (const Absent& x : f.absent) absent[x.tensor] = x.why;
  std::set<std::string> used_absent, may, may_written, rules_applied;

  // Outside the layers.
  std::set<std::string> global_rules;
  for (const TensorRule& r : f.global) {
    global_rules.insert(r.tensor);
    bool known = false;
    for (const arch::TensorSpec& t : arch::kGlobalTensors) known |= r.tensor == std::string(t.name);
    if (!known) bad.push_back(who + "global rule writes " + r.tensor + ", not a declared tensor");
  }
  for (const arch::TensorSpec& t : arch::kGlobalTensors) {
    if (global_rules.count(t.name)) continue;
    if (absent.count(t.name)) {
      used_absent.insert(t.name);
    } else {
      bad.push_back(who + "no rule writes " + t.name);
    }
  }

  for (const Situation& s : situations(f, a)) {
    const Declared d = declared(a, s);
    std::set<std::string> written;
    for (const auto& group : f.layer) {
      for (const TensorRule& r : group) {
        if (!applies(r.when, s.facts)) continue;
        const std::string name = r.tensor;
        written.insert(name);
        rules_applied.insert(r.tensor + std::string(" <- ") + r.hf);
        if (!d.allowed.count(name)) {
          bad.push_back(who + s.label + ": rule " + r.tensor + " <- " + r.hf + " writes " + name +
                        ", which the architecture does not declare in such a layer");
        }
      }
    }
    for (const std::string& name : d.must) {
      if (written.count(name)) continue;
      if (absent.count(name)) {
        used_absent.insert(name);
      } else {
        bad.push_back(who + s.label + ": the architecture needs " + name +
                      " but no rule writes it");
      }
    }
    for (const std::string& name : d.may) {
      may.insert(name);
      if (written.count(name)) may_written.insert(name);
    }
  }
  for (const std::string& name : may) {
    if (may_written.count(name)) continue;
    if (absent.count(name)) {
      used_absent.insert(name);
    } else {
      bad.push_back(who + "the architecture declares " + name +
                    " (optional or an alternative layout) but no rule writes it in any layer");
    }
  }
  for (const auto& [name, why] : absent) {
    if (!used_absent.count(name)) {
      bad.push_back(who +
                    "declared absent, but written or not declared by the architecture: " + name);
    }
  }
  // A rule that applies in no layer the family can have is dead (a wrong When).
  for (const auto& group : f.layer) {
    for (const TensorRule& r : group) {
      if (!rules_applied.count(r.tensor + std::string(" <- ") + r.hf)) {
        bad.push_back(who + "rule " + r.tensor + " <- " + r.hf + " applies in no layer");
      }
    }
  }
  return bad;
}

TEST(ArchCoverage, EveryDeclaredTensorHasARuleAndEveryRuleADeclaredTensor) {
  ASSERT_GE(families().size(), 10u);
  for (const Family* f : families()) {
    SCOPED_TRACE(f->model_type);
    for (const std::string& line : check(*f)) ADD_FAILURE() << line;
  }
}

// The check itself catches the two mistakes it is for.
TEST(ArchCoverage, CatchesAMissingRuleAndAStrayName) {
  const Family& qwen2 = find_family("qwen2");
  ASSERT_TRUE(check(qwen2).empty());
  std::vector<TensorRule> attn;
  std::vector<std::span<const TensorRule>> groups(qwen2.layer.begin(), qwen2.layer.end());
  for (const TensorRule& r : groups[0]) {
    if (std::string(r.tensor) != arch::tensor::kAttnK) attn.push_back(r);
  }
  attn.push_back({"attn_kk.weight", "model.layers.{L}.self_attn.kk.weight"});
  groups[0] = attn;
  Family broken = qwen2;
  broken.layer = groups;
  const std::vector<std::string> bad = check(broken);
  std::string all;
  for (const std::string& line : bad) all += line + "\n";
  EXPECT_NE(all.find("needs attn_k.weight but no rule writes it"), std::string::npos) << all;
  EXPECT_NE(all.find("writes attn_kk.weight, which the architecture does not declare"),
            std::string::npos)
      << all;
}

}  // namespace
}  // namespace lynx::convert
