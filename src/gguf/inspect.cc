// Model summary of a GGUF file: see inspect.h.
#include "gguf/inspect.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "util/strings.h"

namespace lynx::gguf {
namespace {

// An integer hyper-parameter `{arch}.suffix`; per-layer arrays give their maximum.
std::optional<int64_t> arch_int(const File& f, const std::string& arch, const char* suffix) {
  const Value* v = f.find(arch + "." + suffix);
  if (!v) return std::nullopt;
  if (v->is_integer()) return v->as_int(arch + "." + suffix);
  if (v->type == ValueType::ARRAY) {
    std::optional<int64_t> best;
    for (const auto& item : v->as_array()) {
      if (item.is_integer()) best = std::max(best.value_or(item.as_int()), item.as_int());
    }
    return best;
  }
  return std::nullopt;  // a key of an unexpected type is not ours to reject here
}

using util::contains;

std::string opt_str(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : std::string("?");
}

std::string pct(uint64_t part, uint64_t total) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", total ? 100.0 * double(part) / double(total) : 0.0);
  return buf;
}

void line(std::string& out, const char* label, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%-18s", label);
  out += buf;
  out += value;
  out += '\n';
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", x, units[u]);
  }
  return buf;
}

ModelSummary summarize(const File& f) {
  ModelSummary s;
  s.path = f.path();
  s.file_size = f.file_size();
  s.version = f.version();
  s.alignment = f.alignment();
  s.n_metadata = f.metadata().size();
  if (const Value* v = f.find("general.architecture"); v && v->type == ValueType::STRING) {
    s.architecture = v->as_string();
  }
  if (const Value* v = f.find("general.name"); v && v->type == ValueType::STRING) {
    s.name = v->as_string();
  }
  const std::string& a = s.architecture;
  if (!a.empty()) {
    s.n_layer = arch_int(f, a, "block_count");
    s.n_embd = arch_int(f, a, "embedding_length");
    s.n_head = arch_int(f, a, "attention.head_count");
    s.n_head_kv = arch_int(f, a, "attention.head_count_kv");
    s.n_ctx = arch_int(f, a, "context_length");
    s.n_vocab = arch_int(f, a, "vocab_size");
    s.n_expert = arch_int(f, a, "expert_count");
    s.n_expert_used = arch_int(f, a, "expert_used_count");
    s.n_expert_shared = arch_int(f, a, "expert_shared_count");
  }
  // llama.cpp's rule: without head_count_kv there is no grouped-query attention.
  if (!s.n_head_kv) s.n_head_kv = s.n_head;
  // The token list is authoritative for the vocabulary; else the embedding's row count.
  if (const Value* v = f.find("tokenizer.ggml.tokens"); v && v->type == ValueType::ARRAY) {
    s.n_vocab = static_cast<int64_t>(v->as_array().size());
  } else if (const TensorInfo* t = f.find_tensor("token_embd.weight"); t && t->n_dims >= 2) {
    if (!s.n_vocab) s.n_vocab = t->ne[1];
  }

  std::map<uint32_t, TypeStats> by_type;
  s.n_tensors = f.tensors().size();
  for (const TensorInfo& t : f.tensors()) {
    TypeStats& ts = by_type[static_cast<uint32_t>(t.type)];
    ts.type = t.type;
    ++ts.count;
    ts.bytes += t.n_bytes;
    s.tensor_bytes += t.n_bytes;
    // llama.cpp names: routed experts are stacked in blk.N.ffn_{gate,up,down,gate_up}_exps,
    // shared experts in blk.N.ffn_*_shexp, the shared-expert gate in ffn_gate_inp_shexp.
    if (contains(t.name, "_exps")) {
      s.expert_bytes += t.n_bytes;
    } else if (contains(t.name, "_shexp")) {
      s.shared_expert_bytes += t.n_bytes;
      if (contains(t.name, "ffn_gate_inp_shexp") && s.shexp_gate_inp_tensor.empty()) {
        s.shexp_gate_inp_tensor = t.name;
      }
      if (contains(t.name, "ffn_up_shexp") && s.shexp_up_tensor.empty()) {
        s.shexp_up_tensor = t.name;
      }
    } else {
      s.other_bytes += t.n_bytes;
    }
  }
  for (const auto& [type, ts] : by_type) s.types.push_back(ts);
  return s;
}

std::string format_summary(const File& f, const ModelSummary& s, const InspectOptions& opt) {
  std::string out;
  // Names and values from the file are printable()'d: a GGUF may hold escape sequences.
  line(out, "file", printable(s.path));
  line(out, "file size",
       format_bytes(s.file_size) + " (" + std::to_string(s.file_size) + " bytes)");
  line(out, "GGUF version", std::to_string(s.version));
  line(out, "alignment", std::to_string(s.alignment));
  line(out, "architecture", s.architecture.empty() ? "?" : printable(s.architecture));
  if (!s.name.empty()) line(out, "name", printable(s.name));
  line(out, "layers", opt_str(s.n_layer));
  line(out, "embedding length", opt_str(s.n_embd));
  line(out, "heads", opt_str(s.n_head) + " (kv heads " + opt_str(s.n_head_kv) + ")");
  line(out, "context length", opt_str(s.n_ctx));
  line(out, "vocab size", opt_str(s.n_vocab));
  if (s.n_expert || s.n_expert_used || !s.shexp_up_tensor.empty()) {
    // Without the key, a file with no shared-expert tensors has none.
    const std::string shared = s.n_expert_shared           ? std::to_string(*s.n_expert_shared)
                               : s.shexp_up_tensor.empty() ? std::string("0")
                                                           : std::string("?");
    line(out, "experts",
         opt_str(s.n_expert) + ", " + opt_str(s.n_expert_used) + " per token, shared " + shared);
    line(out, "shared expert",
         std::string("ffn_up_shexp ") + (s.shexp_up_tensor.empty() ? "no" : "yes") +
             ", ffn_gate_inp_shexp " + (s.shexp_gate_inp_tensor.empty() ? "no" : "yes"));
  } else {
    line(out, "experts", "none (dense model or no MoE metadata)");
  }
  line(out, "metadata keys", std::to_string(s.n_metadata));
  line(out, "tensors", std::to_string(s.n_tensors) + ", " + format_bytes(s.tensor_bytes));
  if (s.n_tensors) {
    line(out, "routed experts",
         format_bytes(s.expert_bytes) + " (" + pct(s.expert_bytes, s.tensor_bytes) + ")");
    line(out, "shared experts",
         format_bytes(s.shared_expert_bytes) + " (" + pct(s.shared_expert_bytes, s.tensor_bytes) +
             ")");
    line(out, "other weights",
         format_bytes(s.other_bytes) + " (" + pct(s.other_bytes, s.tensor_bytes) + ")");
    if (s.n_expert && *s.n_expert > 0 && s.expert_bytes) {
      line(out, "bytes per expert",
           format_bytes(s.expert_bytes / static_cast<uint64_t>(*s.n_expert)) +
               " (summed over layers)");
    }
    out += "weight types:\n";
    for (const TypeStats& ts : s.types) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "  %-8s %6zu tensors  %12s  %6s\n", tensor_type_name(ts.type),
                    ts.count, format_bytes(ts.bytes).c_str(),
                    pct(ts.bytes, s.tensor_bytes).c_str());
      out += buf;
    }
  }
  if (opt.metadata) {
    out += "metadata:\n";
    for (const KeyValue& kv : f.metadata()) {
      out += "  " + printable(kv.key) + " (" + value_type_name(kv.value.type);
      if (kv.value.type == ValueType::ARRAY) {
        out += " of " + std::to_string(kv.value.as_array().size()) + " " +
               value_type_name(kv.value.elem_type);
      }
      out += ") = " + kv.value.to_string(8) + "\n";
    }
  }
  if (opt.tensors) {
    out += "tensors:\n";
    size_t width = 0;
    for (const TensorInfo& t : f.tensors()) width = std::max(width, printable(t.name).size());
    for (const TensorInfo& t : f.tensors()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "  %-7s %12s  ", tensor_type_name(t.type),
                    format_bytes(t.n_bytes).c_str());
      const std::string name = printable(t.name);
      out += "  " + name + std::string(width - name.size(), ' ') + buf + t.shape_string() + "\n";
    }
  }
  return out;
}

nlohmann::ordered_json value_json(const Value& v) {
  switch (v.type) {
    case ValueType::BOOL:
      return v.as_bool();
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
      return v.as_float();
    case ValueType::STRING:
      return v.as_string();
    case ValueType::ARRAY: {
      nlohmann::ordered_json a = nlohmann::json::array();
      for (const auto& item : v.as_array()) a.push_back(value_json(item));
      return a;
    }
    default:
      if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
      if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
      return nullptr;
  }
}

nlohmann::ordered_json summary_json(const File& f, const ModelSummary& s,
                                    const InspectOptions& opt) {
  using json = nlohmann::ordered_json;
  auto opt_json = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); };
  json j;
  j["path"] = s.path;
  j["file_size"] = s.file_size;
  j["version"] = s.version;
  j["alignment"] = s.alignment;
  j["architecture"] = s.architecture;
  j["name"] = s.name;
  j["n_layer"] = opt_json(s.n_layer);
  j["n_embd"] = opt_json(s.n_embd);
  j["n_head"] = opt_json(s.n_head);
  j["n_head_kv"] = opt_json(s.n_head_kv);
  j["n_ctx"] = opt_json(s.n_ctx);
  j["n_vocab"] = opt_json(s.n_vocab);
  j["n_expert"] = opt_json(s.n_expert);
  j["n_expert_used"] = opt_json(s.n_expert_used);
  j["n_expert_shared"] = opt_json(s.n_expert_shared);
  j["has_ffn_up_shexp"] = !s.shexp_up_tensor.empty();
  j["has_ffn_gate_inp_shexp"] = !s.shexp_gate_inp_tensor.empty();
  j["n_metadata"] = s.n_metadata;
  j["n_tensors"] = s.n_tensors;
  j["tensor_bytes"] = s.tensor_bytes;
  j["expert_bytes"] = s.expert_bytes;
  j["shared_expert_bytes"] = s.shared_expert_bytes;
  j["other_bytes"] = s.other_bytes;
  json types = json::array();
  for (const TypeStats& ts : s.types) {
    types.push_back(
        {{"type", tensor_type_name(ts.type)}, {"count", ts.count}, {"bytes", ts.bytes}});
  }
  j["types"] = types;
  json tensors = json::array();
  for (const TensorInfo& t : f.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"type", tensor_type_name(t.type)},
                       {"shape", std::vector<int64_t>(t.ne, t.ne + t.n_dims)},
                       {"bytes", t.n_bytes},
                       {"offset", t.offset}});
  }
  j["tensors"] = tensors;
  if (opt.metadata) {
    json md = json::object();
    for (const KeyValue& kv : f.metadata()) md[kv.key] = value_json(kv.value);
    j["metadata"] = md;
  }
  return j;
}

}  // namespace lynx::gguf
