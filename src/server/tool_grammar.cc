// The grammar of a forced tool call (tool_grammar.h). The call layouts are those the chat
// parsers read (src/chatparse/, one file per format) as the released templates write them:
//   hermes       <tool_call>\n{"name": N, "arguments": {..}}\n</tool_call>
//   mistral      [TOOL_CALLS][{"name": N, "arguments": {..}, "id": ID}]  (Nemo)
//                [TOOL_CALLS]N[ARGS]{..}                                 (2506+)
//   llama3       <|python_tag|>? {"name": N, "parameters": {..}}, several joined by ';'
//   deepseek-v3
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{..}<｜tool▁call▁end｜>..<｜tool▁calls▁end｜>
//                (V3.1+), or function<｜tool▁sep｜>N\n```json\n{..}\n``` in the call (V3, R1)
//   kimi-k2
//   <|tool_calls_section_begin|><|tool_call_begin|>functions.N:I<|tool_call_argument_begin|>{..}<|tool_call_end|>..<|tool_calls_section_end|>
//   qwen3-coder
//   <tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n..</function>\n</tool_call> glm-4.5
//   <tool_call>N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n..</tool_call>
//   minimax-m2
//   <minimax:tool_call>\n<invoke name="N">\n<parameter name="K">V</parameter>\n..</invoke>\n..
//   </minimax:tool_call>
//   seed-oss
//   <seed:tool_call>\n<function=N>\n<parameter=K>V</parameter>\n..</function>\n</seed:tool_call>
//   harmony
//   [<|channel|>analysis<|message|>..<|end|><|start|>assistant]
//                <|channel|>commentary to=functions.N <|constrain|>json<|message|>{..}[<|call|>]
// In the XML formats a string parameter is raw text (without "</", which would end it) and
// any other parameter the JSON its schema allows, as chatparse's typed_value reads them back.
// Both layouts are allowed where a format has two: the model's logits pick the one it was
// trained on.
#include "server/tool_grammar.h"

#include <nlohmann/json.hpp>

namespace lynx::server {
namespace {

using ToolFormat = chatparse::ToolFormat;

// Bytes of `text` as a GBNF string literal.
std::string lit(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "\"";
  for (char ch : text) {
    const auto c = uint8_t(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// {"name": "N", "KEY": ARGS ...} as JSON (ARGS a rule that ends in `space`); `extra`, GBNF
// after the arguments (Mistral's optional id).
std::string json_call(const std::string& name, std::string_view key, const std::string& args,
                      std::string_view extra = "") {
  return R"("{" space "\"name\"" space ":" space )" + lit("\"" + name + "\"") +
         R"( space "," space )" + lit("\"" + std::string(key) + "\"") + " space \":\" space " +
         args + " " + std::string(extra) + R"( "}" space)";
}

// Text up to the first `close` (reasoning up to "</think>"): a right-linear grammar of the
// matcher that finds `close` (rule NAME<k>: the
// last k bytes are its first k). '<' occurs only at its start, so a '<' always goes back to
// state 1. Every rule may stop, and `close` after any state is its first occurrence.
std::string text_until_rules(std::string_view close, const std::string& name) {
  std::string out;
  const size_t last = close.size() - 1;
  for (size_t k = 0; k < last; ++k) {
    const std::string self = name + std::to_string(k);
    const char next = close[k];  // the byte that extends the match
    const std::string other = next == '<' ? "[^<]" : std::string("[^<") + next + "]";
    out += self + " ::= ( " + other + " " + name + "0 | \"<\" " + name + "1";
    if (k > 0) out += " | " + lit(std::string(1, next)) + " " + name + std::to_string(k + 1);
    out += " )?\n";
  }
  // All but the last byte seen: that byte would close the text, so it is not part of it.
  out += name + std::to_string(last) + " ::= ( [^<" + std::string(1, close[last]) + "] " + name +
         "0 | \"<\" " + name + "1 )?\n";
  return out;
}

std::string think_rules(std::string_view close) {
  return text_until_rules(std::string(close), "tc-think");
}

// A string parameter's value as the XML formats write it, raw: no "</" (which would end the
// value or the call), and no '<' at all where the length is bounded (so that the count is of
// characters). An unbounded one may not end in '<'.
std::string raw_text_rule(size_t lo, long hi) {
  if (lo == 0 && hi < 0) return "( [^<] | \"<\"+ [^</] )*";
  return "[^<]{" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "}";
}

struct Tool {
  std::string name;
  std::string args;  // the rule of its arguments
};

std::vector<std::string> format_markers(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return {"<tool_call>", "</tool_call>"};
    case ToolFormat::kMistral:
      return {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"};
    case ToolFormat::kLlama3:
      return {"<|python_tag|>"};
    case ToolFormat::kDeepSeekV3:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
              "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"};
    case ToolFormat::kKimiK2:
      return {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
              "<|tool_call_argument_begin|>", "<|tool_call_end|>"};
    case ToolFormat::kQwen3Coder:
      return {"<tool_call>", "</tool_call>", "<function=",
              "</function>", "<parameter=",  "</parameter>"};
    case ToolFormat::kGlm45:
      return {"<tool_call>", "</tool_call>", "<arg_key>",
              "</arg_key>",  "<arg_value>",  "</arg_value>"};
    case ToolFormat::kHarmony:
      return {"<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|start|>", "<|call|>"};
    case ToolFormat::kMiniMaxM2:
      return {"<minimax:tool_call>", "</minimax:tool_call>"};
    case ToolFormat::kSeedOss:
      return {"<seed:tool_call>", "</seed:tool_call>"};
    default:
      return {};
  }
}

// The rules `tc-call` (one call, any of the tools) and `tc-calls` (the answer's calls).
std::string call_rules(ToolFormat f, const std::vector<Tool>& tools, bool parallel) {
  std::string out, alts;
  auto add = [&](const std::string& name, const std::string& body) {
    out += name + " ::= " + body + "\n";
    alts += (alts.empty() ? "" : " | ") + name;
  };
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string& n = tools[i].name;
    const std::string& a = tools[i].args;
    const std::string r = "tc-call" + std::to_string(i);
    switch (f) {
      case ToolFormat::kHermes:
        add(r,
            "\"<tool_call>\" tc-lay " + json_call(n, "arguments", a) + " tc-lay \"</tool_call>\"");
        break;
      case ToolFormat::kMistral:
        // The Nemo layout's array element (its id after the arguments), and the 2506 layout's
        // call (v11 tokenizers write NAME[CALL_ID]ID[ARGS], v13 NAME[ARGS]).
        add(r,
            json_call(n, "arguments", a,
                      R"(( "," space "\"id\"" space ":" space "\"" [A-Za-z0-9]{9} "\"" space )?)"));
        out += "tc-v11-" + std::to_string(i) + " ::= \"[TOOL_CALLS]\" " + lit(n) +
               " ( \"[CALL_ID]\" [A-Za-z0-9]{9} )? \"[ARGS]\" " + a + "\n";
        break;
      case ToolFormat::kLlama3:
        add(r, json_call(n, "parameters", a));
        break;
      case ToolFormat::kDeepSeekV3:
        add(r, "\"<｜tool▁call▁begin｜>\" ( " + lit(n) + " \"<｜tool▁sep｜>\" " + a +
                   " | \"function<｜tool▁sep｜>\" " + lit(n) + " \"\\n```json\\n\" " + a +
                   " \"\\n```\" ) \"<｜tool▁call▁end｜>\"");
        break;
      case ToolFormat::kKimiK2:
        add(r, "\"<|tool_call_begin|>functions.\" " + lit(n) +
                   " \":\" [0-9]{1,3} \"<|tool_call_argument_begin|>\" " + a +
                   " \"<|tool_call_end|>\"");
        break;
      case ToolFormat::kQwen3Coder:
        add(r, "\"<tool_call>\\n<function=\" " + lit(n) + " \">\\n\" " + a +
                   " \"</function>\\n</tool_call>\"");
        break;
      case ToolFormat::kGlm45:
        add(r, "\"<tool_call>\" " + lit(n) + " \"\\n\" " + a + " \"</tool_call>\"");
        break;
      case ToolFormat::kSeedOss:
        add(r, "\"<seed:tool_call>\\n<function=\" " + lit(n) + " \">\\n\" " + a +
                   " \"</function>\\n</seed:tool_call>\"");
        break;
      case ToolFormat::kMiniMaxM2:
        add(r, "\"<invoke name=\\\"\" " + lit(n) + " \"\\\">\\n\" " + a + " \"</invoke>\\n\"");
        break;
      case ToolFormat::kHarmony:
        add(r, "\"<|channel|>commentary to=functions.\" " + lit(n) +
                   " \" <|constrain|>json<|message|>\" " + a);
        break;
      default:
        break;
    }
  }
  out += "tc-call ::= " + alts + "\n";
  switch (f) {
    case ToolFormat::kHermes:
    case ToolFormat::kQwen3Coder:
    case ToolFormat::kGlm45:
    case ToolFormat::kSeedOss:
      out += parallel ? "tc-calls ::= tc-call ( tc-lay tc-call )*\n" : "tc-calls ::= tc-call\n";
      break;
    case ToolFormat::kHarmony:
      // One call per generation: <|call|> ends it (an end-of-generation token, else text).
      out += "tc-calls ::= tc-call \"<|call|>\"?\n";
      break;
    case ToolFormat::kMistral: {
      std::string v11;
      for (size_t i = 0; i < tools.size(); ++i)
        v11 += (i ? " | tc-v11-" : "tc-v11-") + std::to_string(i);
      out += "tc-v11 ::= " + v11 + "\n";
      out += parallel
                 ? "tc-calls ::= \"[TOOL_CALLS]\" \"[\" space tc-call ( \",\" space tc-call )* "
                   "\"]\" space | tc-v11+\n"
                 : "tc-calls ::= \"[TOOL_CALLS]\" \"[\" space tc-call \"]\" space | tc-v11\n";
      break;
    }
    case ToolFormat::kLlama3:
      out += parallel ? "tc-calls ::= \"<|python_tag|>\"? tc-call ( \";\" tc-lay tc-call )*\n"
                      : "tc-calls ::= \"<|python_tag|>\"? tc-call\n";
      break;
    case ToolFormat::kDeepSeekV3:
      out += std::string("tc-calls ::= \"<｜tool▁calls▁begin｜>\" tc-call ") +
             (parallel ? "( tc-lay tc-call )* " : "") + "\"<｜tool▁calls▁end｜>\"\n";
      break;
    case ToolFormat::kKimiK2:
      out += std::string("tc-calls ::= \"<|tool_calls_section_begin|>\" tc-call ") +
             (parallel ? "( tc-lay tc-call )* " : "") + "\"<|tool_calls_section_end|>\"\n";
      break;
    case ToolFormat::kMiniMaxM2:
      out += std::string("tc-calls ::= \"<minimax:tool_call>\\n\" tc-call ") +
             (parallel ? "( tc-lay tc-call )* " : "") + "\"</minimax:tool_call>\"\n";
      break;
    default:
      break;
  }
  return out;
}

// The rule of a tool's arguments: its schema's grammar, or any object when it has no schema
// or one the converter refuses (then `why` says so).
std::string arguments_rule(const nlohmann::ordered_json& fn, size_t i, std::string& rules,
                           std::string& why) {
  const auto p = fn.find("parameters");
  if (p == fn.end() || !p->is_object() || p->empty()) return "object";
  nlohmann::ordered_json schema = *p;
  if (const auto t = schema.find("type"); t == schema.end()) {
    schema["type"] = "object";  // arguments are an object whatever the schema leaves open
  } else if (*t != "object") {
    why = "parameters must be of type \"object\"";
    return "object";
  }
  const std::string prefix = "tc" + std::to_string(i) + "-";
  try {
    rules += grammar::schema_rules_gbnf(schema.dump(), prefix);
  } catch (const Error& e) {
    why = e.what();
    return "object";
  }
  return prefix + "root";
}

// A value of the XML formats (Qwen3-Coder, GLM-4.5), which write parameters as raw text that
// typed_value (chatparse) reads back: a property of type "string" as the raw string, anything
// else as the JSON its schema allows (read back as that value). Throws grammar's Error where
// the value cannot be enforced.
std::string xml_value(const nlohmann::ordered_json& sub, const nlohmann::ordered_json& params,
                      const std::string& prefix, std::string& rules) {
  using ojson = nlohmann::ordered_json;
  const bool string_typed = sub.is_object() && sub.contains("type") && sub["type"] == "string";
  auto no_close = [](const std::string& v) { return v.find("</") == std::string::npos; };
  const ojson* values = nullptr;
  ojson one;
  if (sub.is_object() && sub.contains("const")) {
    one = ojson::array({sub["const"]});
    values = &one;
  } else if (sub.is_object() && sub.contains("enum") && sub["enum"].is_array()) {
    values = &sub["enum"];
  }
  if (values) {
    std::string alts;
    for (const ojson& v : *values) {
      std::string text = v.dump();
      if (v.is_string()) {
        const std::string raw = v.get<std::string>();
        // Raw where it reads back as this string: always under type "string", otherwise
        // where the text is not also JSON.
        const bool raw_reads_back =
            string_typed || ojson::parse(raw, nullptr, false).is_discarded();
        if (raw_reads_back && no_close(raw)) {
          text = raw;
        } else if (string_typed) {
          throw Error("json schema: a value holding \"</\" cannot be written in this format");
        }
      }
      alts += (alts.empty() ? "" : " | ") + lit(text);
    }
    return "( " + alts + " )";
  }
  if (string_typed) {
    for (const char* k : {"pattern", "format"}) {
      if (sub.contains(k)) {
        throw Error(std::string("json schema: keyword '") + k +
                    "' on a string parameter is not enforced in this format");
      }
    }
    auto bound = [&](const char* k) -> long {
      if (!sub.contains(k)) return -1;
      if (!sub[k].is_number_integer() || sub[k].get<long>() < 0 || sub[k].get<long>() > 1000) {
        throw Error(std::string("json schema: ") + k + " must be an integer from 0 to 1000");
      }
      return sub[k].get<long>();
    };
    const long lo = bound("minLength"), hi = bound("maxLength");
    if (hi >= 0 && hi < lo) throw Error("json schema: maxLength below minLength");
    return "( " + raw_text_rule(size_t(std::max(lo, 0L)), hi) + " )";
  }
  // JSON, with the tool's definitions so that its $refs resolve.
  ojson doc = sub.is_object() ? sub : ojson::object();
  if (!sub.is_object() && !sub.is_boolean()) throw Error("json schema: a schema must be an object");
  for (const char* k : {"$defs", "definitions"}) {
    if (params.contains(k) && !doc.contains(k)) doc[k] = params[k];
  }
  rules += grammar::schema_rules_gbnf(doc.dump(), prefix);
  return prefix + "root";
}

// The parameters of a call in an XML format: the schema's properties in its order, the
// required ones always, the others optionally; any parameters where there is no schema.
std::string xml_params_rule(ToolFormat f, const nlohmann::ordered_json& fn, size_t i,
                            std::string& rules, std::string& why) {
  auto param = [&](const std::string& key_rule, const std::string& value) {
    if (f == ToolFormat::kMiniMaxM2) {
      return "\"<parameter name=\\\"\" " + key_rule + " \"\\\">\" " + value +
             " \"</parameter>\\n\"";
    }
    if (f == ToolFormat::kSeedOss) {
      return "\"<parameter=\" " + key_rule + " \">\" " + value + " \"</parameter>\\n\"";
    }
    return f == ToolFormat::kQwen3Coder
               ? "\"<parameter=\" " + key_rule + " \">\\n\" " + value + " \"\\n</parameter>\\n\""
               : "\"<arg_key>\" " + key_rule + " \"</arg_key>\\n<arg_value>\" " + value +
                     " \"</arg_value>\\n\"";
  };
  const std::string any =
      "( " + param("[A-Za-z0-9_.-]{1,64}", "( " + raw_text_rule(0, -1) + " )") + " )*";
  const auto p = fn.find("parameters");
  if (p == fn.end() || !p->is_object() || p->empty()) return any;
  const auto props = p->find("properties");
  if (props == p->end() || !props->is_object()) {
    why = "parameters without properties";
    return any;
  }
  if (const auto t = p->find("type"); t != p->end() && *t != "object") {
    why = "parameters must be of type \"object\"";
    return any;
  }
  std::string seq, part_rules;
  try {
    size_t k = 0;
    for (const auto& [key, sub] : props->items()) {
      const std::string prefix = "tc" + std::to_string(i) + "p" + std::to_string(k++) + "-";
      const std::string item = param(lit(key), xml_value(sub, *p, prefix, part_rules));
      bool req = false;
      if (const auto r = p->find("required"); r != p->end() && r->is_array()) {
        for (const auto& x : *r) req = req || x == key;
      }
      seq += (seq.empty() ? "" : " ") + (req ? item : "( " + item + " )?");
    }
  } catch (const Error& e) {
    why = e.what();
    return any;
  }
  rules += part_rules;
  return seq.empty() ? "\"\"" : "( " + seq + " )";
}

}  // namespace

bool tool_grammar_covers(ToolFormat f) {
  return !format_markers(f).empty();
}

ToolGrammar tool_call_grammar(const chatparse::ParseOptions& o,
                              const nlohmann::ordered_json& offered, std::string_view only) {
  ToolGrammar g;
  const ToolFormat f = o.format.tools;
  if (!tool_grammar_covers(f) || !offered.is_array()) return g;
  std::string rules;
  std::vector<Tool> tools;
  for (const auto& t : offered) {
    const nlohmann::ordered_json& fn = t.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (!only.empty() && name != only) continue;
    std::string why;
    const bool xml = f == ToolFormat::kQwen3Coder || f == ToolFormat::kGlm45 ||
                     f == ToolFormat::kMiniMaxM2 || f == ToolFormat::kSeedOss;
    tools.push_back({name, xml ? xml_params_rule(f, fn, tools.size(), rules, why)
                               : arguments_rule(fn, tools.size(), rules, why)});
    if (!why.empty()) g.free_arguments.push_back(name + ": " + why);
  }
  if (tools.empty()) return g;
  g.markers = format_markers(f);
  std::string pre = "tc-lay";
  if (f == ToolFormat::kHarmony) {
    // The analysis message may come first (the generation prompt ends with <|start|>assistant,
    // so the first message starts at <|channel|>).
    // Its text holds no "<|", which would begin one of harmony's markers (chatparse ends the
    // message at <|start|>, <|call|> and <|return|> too).
    pre = "( \"<|channel|>analysis<|message|>\" tc-an \"<|end|><|start|>assistant\" )?";
    rules += "tc-an ::= ( [^<] | \"<\"+ [^<|] )*\n";
  } else if (o.format.think_tags) {
    // Reasoning before the call, free: the grammar starts constraining at the call. A prompt
    // that opened the block leaves the answer inside it, to be closed.
    const std::string open(o.format.think_open), close(o.format.think_close);
    pre = o.starts_in_reasoning
              ? "tc-think0 " + lit(close) + " tc-lay"
              : "tc-lay ( " + lit(open) + " tc-think0 " + lit(close) + " tc-lay )?";
    rules += think_rules(close);
    g.markers.push_back(open);
    g.markers.push_back(close);
  }
  g.gbnf = "root ::= " + pre + " tc-calls tc-lay\n" + call_rules(f, tools, o.parallel_tool_calls) +
           "tc-lay ::= [ \\t\\n]{0,4}\n" + rules + grammar::json_primitives_gbnf();
  return g;
}

std::shared_ptr<const grammar::TokenIndex> grammar_token_index(
    const Tokenizer& tok, std::span<const int32_t> eog, std::span<const std::string> markers) {
  std::vector<std::string> pieces(size_t(tok.n_vocab()));
  std::vector<bool> is_eog(pieces.size(), false);
  for (int32_t id : eog) is_eog[size_t(id)] = true;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (!tok.is_control(id)) pieces[size_t(id)] = tok.token_to_piece(id);
  }
  for (const std::string& m : markers) {
    const int32_t id = tok.find_token(m);
    if (id >= 0 && tok.is_control(id) && !is_eog[size_t(id)]) pieces[size_t(id)] = m;
  }
  return std::make_shared<grammar::TokenIndex>(std::move(pieces), std::move(is_eog));
}

}  // namespace lynx::server
