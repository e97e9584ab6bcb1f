// The convert tables (src/convert/families/) against the architecture descriptions
// (src/model/arch): the converter takes which tensors a layer has from the description, so a
// table only names where each comes from. Here: every registered architecture has a convert
// family or is listed as unconverted with the reason (convert::unconverted()); for every family,
// every tensor its architecture declares (outside the layers, in every block kind, alternative
// layouts and NextN blocks included) has a rule or is declared absent with the reason
// (Family::absent), and every rule names a tensor the architecture declares, once. A table that
// misses a tensor makes convert refuse the family ("has no rule for"); a stray name would be a
// rule that is never used.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "convert/family.h"
#include "model/arch/arch.h"

namespace lynx::convert {
namespace {

// Every tensor the architecture declares anywhere in a layer, or outside the layers (global).
std::set<std::string> declared(const arch::ArchDesc& a, bool global) {
  std::set<std::string> out;
  if (global) {
    for (const arch::TensorSpec& t : arch::kGlobalTensors) out.insert(t.name);
    return out;
  }
  const arch::BlockTables& b = a.blocks;
  for (auto groups :
       {b.attn_gqa, b.attn_mla, b.attn_alt, b.attn_delta, b.ffn_dense, b.ffn_moe, a.nextn}) {
    for (const arch::TensorGroup& g : groups) {
      for (const arch::TensorSpec& t : g.tensors) out.insert(t.name);
    }
  }
  return out;
}

// The problems of one family, one line each (empty: none).
std::vector<std::string> check(const Family& f) {
  std::vector<std::string> bad;
  const std::string who = std::string(f.model_type) + " (" + f.arch + "): ";
  const arch::ArchDesc& a = arch::find(f.arch);
  std::set<std::string> used_absent;
  for (bool global : {true, false}) {
    const std::set<std::string> want = declared(a, global);
    // Rules by (tensor, layout): one each; MLA's two layouts of kv_b are two rules.
    std::map<std::pair<std::string, Layout>, int> rules;
    auto note = [&](const TensorRule& r) {
      if (++rules[{r.tensor, r.layout}] == 2) {
        bad.push_back(who + "two rules write " + r.tensor);
      }
      if (!want.count(r.tensor)) {
        bad.push_back(who + "rule " + r.tensor + " <- " + r.hf + " writes " + r.tensor +
                      (global ? ", which is not a tensor outside the layers"
                              : ", which the architecture does not declare in its layers"));
      }
    };
    if (global) {
      for (const TensorRule& r : f.global) note(r);
    } else {
      for (const auto& group : f.layer) {
        for (const TensorRule& r : group) note(r);
      }
    }
    for (const std::string& name : want) {
      const bool whole =
          rules.count({name, Layout::kAny}) || rules.count({name, Layout::kMlaWhole});
      const bool split =
          rules.count({name, Layout::kAny}) || rules.count({name, Layout::kMlaSplit});
      if (whole || split) {
        if (absent_reason(f, name))
          bad.push_back(who + name + " has a rule and is declared absent");
        continue;
      }
      if (absent_reason(f, name)) {
        used_absent.insert(name);
      } else {
        bad.push_back(who + "the architecture declares " + name + " but no rule writes it");
      }
    }
  }
  // Tensors outside the description: one the architecture declares would be written twice.
  for (const TensorRule& r : f.unrun) {
    if (declared(a, false).count(r.tensor) || declared(a, true).count(r.tensor)) {
      bad.push_back(who + "unrun rule " + r.tensor + " is a tensor the architecture declares");
    }
  }
  for (const Absent& x : f.absent) {
    if (!used_absent.count(x.tensor) && !declared(a, false).count(x.tensor) &&
        !declared(a, true).count(x.tensor)) {
      bad.push_back(who + "declared absent, but not a tensor of the architecture: " + x.tensor);
    }
    if (std::string(x.why).empty()) bad.push_back(who + x.tensor + " is absent without a reason");
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

// Every registered architecture is converted by some family or listed as unconverted, with a
// reason; none is both, and the list names only registered architectures.
TEST(ArchCoverage, EveryArchitectureHasAFamilyOrIsListedUnconverted) {
  std::set<std::string> converted, listed;
  for (const Family* f : families()) converted.insert(f->arch);
  for (const Unconverted& u : unconverted()) {
    EXPECT_TRUE(listed.insert(u.arch).second) << u.arch << " listed twice";
    EXPECT_FALSE(converted.count(u.arch)) << u.arch << " has a family and is listed unconverted";
    EXPECT_FALSE(std::string(u.why).empty()) << u.arch;
    EXPECT_NO_THROW(arch::find(u.arch)) << u.arch;
  }
  for (const arch::ArchDesc* a : arch::all()) {
    EXPECT_TRUE(converted.count(a->name) || listed.count(a->name))
        << a->name << " has no convert family and is not listed in convert::unconverted()";
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
  EXPECT_NE(all.find("declares attn_k.weight but no rule writes it"), std::string::npos) << all;
  EXPECT_NE(all.find("writes attn_kk.weight, which the architecture does not declare"),
            std::string::npos)
      << all;
}

}  // namespace
}  // namespace lynx::convert
