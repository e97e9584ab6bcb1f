// Chat formats: detection from the models' Jinja templates and the exact prompt strings
// those templates produce (expected strings written out from the templates by hand).
#include <gtest/gtest.h>

#include "lynx/chat.h"

namespace lynx {
namespace {

const std::vector<ChatMessage> kConv = {
    {"system", "You are terse."},
    {"user", "Hi"},
    {"assistant", "Hello."},
    {"user", "2+2?"},
};

// Template texts as shipped in tokenizer_config.json (abridged where marked).
const char* kQwen2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif "
    "%}{{'<|im_start|>' "
    "+ message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const char* kMixtralTemplate =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";
const char* kTuluTemplate =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ "
    "'<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}{{ "
    "'<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}{% if "
    "not loop.last %}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}{% else "
    "%}{{ '<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}{% if "
    "loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}";
const char* kDeepSeek2Template =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif "
    "%}{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + "
    "message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + "
    "message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ message['content'] "
    "+ '\\n\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif "
    "%}";
const char* kDeepSeek3Template =  // abridged
    "{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] "
    "== 'user' %}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == "
    "'assistant' and message['content'] is not none %}{{'<｜Assistant｜>' + message['content'] + "
    "'<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}{% if add_generation_prompt %}"
    "{{'<｜Assistant｜>'}}{% endif %}";
const char* kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
const char* kPhi3Template =
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' "
    "%}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

const char* kGlm45Template =  // abridged (zai-org/GLM-4.5 chat_template.jinja)
    "[gMASK]<sop>\n{%- if tools -%}\n<|system|>\n# Tools\n{%- endif -%}\n{% for m in messages "
    "%}\n{%- if m.role == 'user' -%}<|user|>\n{{ visible_text(m.content) }}\n{%- elif m.role "
    "== 'assistant' -%}\n<|assistant|>\n{%- if loop.index0 > ns.last_user_index and "
    "reasoning_content -%}\n{{ '\\n<think>' + reasoning_content.strip() +  '</think>'}}\n{%- "
    "else -%}\n{{ '\\n<think></think>' }}\n{%- endif -%}\n{%- elif m.role == 'system' "
    "-%}\n<|system|>\n{{ visible_text(m.content) }}\n{%- endif -%}\n{%- endfor -%}\n{%- if "
    "add_generation_prompt -%}\n    <|assistant|>{{- '\\n<think></think>' if (enable_thinking "
    "is defined and not enable_thinking) else '' -}}\n{%- endif -%}";
// GLM-4-9B-chat: also "[gMASK]<sop>", but other newlines; not rendered as GLM-4.5 (abridged).
const char* kGlm4Template =
    "[gMASK]<sop>{% for item in messages %}{% if item['role'] == 'user' %}<|user|>\n{{ "
    "item['content'] }}{% elif item['role'] == 'assistant' %}<|assistant|>\n{{ item['content'] "
    "}}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
const char* kHarmonyTemplate =  // gpt-oss's chat_template.jinja, abridged
    "{{- \"<|start|>system<|message|>\" }}{{- build_system_message() }}{{- \"<|end|>\" }}"
    "{%- elif message.role == 'user' -%}{{- \"<|start|>user<|message|>\" + message.content + "
    "\"<|end|>\" }}{{- \"<|start|>assistant<|channel|>final<|message|>\" + message.content + "
    "\"<|end|>\" }}{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}";

const char* kMinimaxM2Template =  // abridged (MiniMaxAI/MiniMax-M2 chat_template.jinja)
    "{%- macro build_system_message(system_message) -%}{%- if system_message and "
    "system_message.content -%}{{- visible_text(system_message.content) }}{%- else -%}{%- if "
    "model_identity is not defined -%}{%- set model_identity = \"You are a helpful assistant. "
    "Your name is MiniMax-M2 and is built by MiniMax.\" -%}{%- endif -%}{{- model_identity }}"
    "{%- endif -%}{%- endmacro -%}{{- ']~!b[' ~ ']~b]system' ~ '\\n' }}{{- "
    "build_system_message(system_message) }}{{- '[e~[\\n' }}{%- if message.role == "
    "'assistant' -%}{{- ']~b]ai' ~ '\\n' }}{%- elif message.role == 'user' -%}{{- ']~b]user' "
    "~ '\\n' }}{%- if add_generation_prompt -%}{{- ']~b]ai' ~ '\\n' ~ '<think>' ~ '\\n' "
    "}}{%- endif -%}";

const char* kDots1Template =  // abridged (dots.llm1.inst's markers)
    "{% if messages[0]['role'] == 'system' %}<|system|>{{ messages[0]['content'] }}"
    "<|endofsystem|>{% endif %}{% for message in messages %}{% if message['role'] == 'user' %}"
    "<|userprompt|>{{ message['content'] }}<|endofuserprompt|>{% elif message['role'] == "
    "'assistant' %}<|response|>{{ message['content'] }}<|endofresponse|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|response|>{% endif %}";

const char* kLing2Template =  // abridged (Ling-mini-2.0's tokenizer_config.json chat_template)
    "{% set thinking_option = 'off' %}\n{{- '<role>SYSTEM</role>' }}\n{%- if messages[0].role "
    "== 'system' %}\n    {{- messages[0].content + '\\n' }}\n{%- endif %}\n{{- 'detailed "
    "thinking ' + thinking_option + '<|role_end|>' }}\n{%- for message in messages %}\n    {%- "
    "if message.role == \"user\" %}\n        {{- '<role>HUMAN</role>' + message.content + "
    "'<|role_end|>' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    "
    "{{- '<role>ASSISTANT</role>' }}\n{%- endif %}";

const char* kHunyuanMoeTemplate =  // abridged (Hunyuan's has_head template)
    "{% for message in messages %}{% set content = message['content'] %}{% if loop.index0 == 0 "
    "and message['role'] == 'system' %}{% set content = '<|startoftext|>' + content + "
    "'<|extra_4|>' %}{% endif %}{% if message['role'] == 'user' %}{% set content = "
    "'<|startoftext|>' + content + '<|extra_0|>' %}{% elif message['role'] == 'assistant' %}{% "
    "set content = content + '<|eos|>' %}{% endif %}{{ content }}{% endfor %}";

TEST(ChatDetect, FamiliesFromTemplates) {
  EXPECT_EQ(chat_format_from_template(kHarmonyTemplate).name, "harmony");
  EXPECT_EQ(chat_format_from_template(kQwen2Template).name, "chatml");
  EXPECT_EQ(chat_format_from_template(kQwen2Template).default_system,
            "You are a helpful assistant.");
  EXPECT_EQ(chat_format_from_template(kMixtralTemplate).name, "mistral");
  EXPECT_EQ(chat_format_from_template(kTuluTemplate).name, "tulu");
  EXPECT_EQ(chat_format_from_template(kDeepSeek2Template).name, "deepseek2");
  EXPECT_EQ(chat_format_from_template(kDeepSeek3Template).name, "deepseek3");
  EXPECT_EQ(chat_format_from_template(kLlama3Template).name, "llama3");
  EXPECT_EQ(chat_format_from_template(kPhi3Template).name, "phi3");
  EXPECT_EQ(chat_format_from_template(kGlm45Template).name, "glm4.5");
  EXPECT_EQ(chat_format_from_template(kMinimaxM2Template).name, "minimax-m2");
  EXPECT_EQ(chat_format_from_template(kDots1Template).name, "dots1");
  EXPECT_EQ(chat_format_from_template(kLing2Template).name, "ling2");
  // A Bailing template without Ling 2.0's thinking_option is no match at all.
  EXPECT_THROW(chat_format_from_template("<role>HUMAN</role>{{ m }}<|role_end|>"), Error);
  EXPECT_EQ(chat_format_from_template(kHunyuanMoeTemplate).name, "hunyuan-moe");
  // Its <|user|> / <|assistant|> are not Tulu's: another GLM template is no match at all.
  EXPECT_THROW(chat_format_from_template(kGlm4Template), Error);
  // GLM-5.2 (glm-dsa): GLM-4.5's markers, but a reasoning-effort system turn first (abridged
  // from ik_llama.cpp's models/templates/GLM-5.2.jinja): not rendered as glm4.5.
  EXPECT_THROW(chat_format_from_template(
                   "[gMASK]<sop>{%- if enable_thinking is not defined or enable_thinking -%}"
                   "<|system|>Reasoning Effort: {{ effective_reasoning_effort | capitalize }}"
                   "{%- endif -%}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
                   "{% endfor %}<|assistant|><think></think>"),
               Error);
}

TEST(ChatDetect, UnknownTemplateAndNameAreErrors) {
  try {
    chat_format_from_template("{{ messages | my_custom_filter }}");
    FAIL() << "expected lynx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unrecognized chat template"), std::string::npos);
  }
  try {
    chat_format_from_name("vicuna");
    FAIL() << "expected lynx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vicuna"), std::string::npos);
  }
  EXPECT_EQ(chat_format_from_name("mixtral").name, "mistral");
  EXPECT_EQ(chat_format_from_name("olmoe").name, "tulu");
}

TEST(ChatRender, ChatMLWithAndWithoutDefaultSystem) {
  const auto qwen = chat_format_from_template(kQwen2Template);
  EXPECT_EQ(render_chat(qwen, kConv, true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  const std::vector<ChatMessage> user_only = {{"user", "Hi"}};
  EXPECT_EQ(render_chat(qwen, user_only, false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(render_chat(chat_format_from_name("chatml"), user_only, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(qwen.renders_bos());
}

TEST(ChatRender, Mistral) {
  const auto f = chat_format_from_template(kMixtralTemplate, "<s>", "</s>");
  EXPECT_EQ(render_chat(f, kConv, true),
            "<s>[INST] You are terse.\n\nHi [/INST]Hello.</s>[INST] 2+2? [/INST]");
  EXPECT_TRUE(f.renders_bos());
  const std::vector<ChatMessage> tool = {{"tool", "x"}};
  EXPECT_THROW(render_chat(f, tool, true), Error);
}

TEST(ChatRender, TuluForOlmoe) {
  const auto f = chat_format_from_template(kTuluTemplate, "<|endoftext|>", "<|endoftext|>");
  EXPECT_EQ(render_chat(f, kConv, true),
            "<|endoftext|><|system|>\nYou are terse.\n<|user|>\nHi\n"
            "<|assistant|>\nHello.<|endoftext|>\n<|user|>\n2+2?\n<|assistant|>\n");
  // The last assistant turn gets no trailing newline; no generation prompt after it.
  const std::vector<ChatMessage> done = {{"user", "Hi"}, {"assistant", "Yo"}};
  EXPECT_EQ(render_chat(f, done, false),
            "<|endoftext|><|user|>\nHi\n<|assistant|>\nYo<|endoftext|>");
}

TEST(ChatRender, DeepSeek2And3) {
  const std::string bos = "<｜begin▁of▁sentence｜>", eos = "<｜end▁of▁sentence｜>";
  const auto v2 = chat_format_from_template(kDeepSeek2Template, bos, eos);
  EXPECT_EQ(render_chat(v2, kConv, true), bos + "You are terse.\n\nUser: Hi\n\nAssistant: Hello." +
                                              eos + "User: 2+2?\n\nAssistant:");
  const auto v3 = chat_format_from_template(kDeepSeek3Template, bos, eos);
  EXPECT_EQ(render_chat(v3, kConv, true),
            bos +
                "You are terse.<｜User｜>Hi<｜Assistant｜>Hello.<｜end▁of▁sentence｜>"
                "<｜User｜>2+2?<｜Assistant｜>");
}

TEST(ChatRender, Llama3TrimsContent) {
  const auto f = chat_format_from_template(kLlama3Template, "<|begin_of_text|>", "<|eot_id|>");
  const std::vector<ChatMessage> m = {{"system", " be brief\n"}, {"user", "Hi"}};
  EXPECT_EQ(render_chat(f, m, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nbe brief<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatRender, Phi3) {
  const auto f = chat_format_from_template(kPhi3Template, "<s>", "<|endoftext|>");
  EXPECT_EQ(render_chat(f, kConv, true),
            "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n"
            "<|assistant|>\nHello.<|end|>\n<|user|>\n2+2?<|end|>\n<|assistant|>\n");
  const std::vector<ChatMessage> m = {{"system", ""}, {"user", "Hi"}};
  EXPECT_EQ(render_chat(f, m, false), "<|user|>\nHi<|end|>\n<|endoftext|>");
  EXPECT_FALSE(f.renders_bos());
}

TEST(ChatRender, Glm45) {
  const auto f = chat_format_from_template(kGlm45Template, "", "<|endoftext|>");
  EXPECT_TRUE(f.renders_bos());  // "[gMASK]<sop>" leads every prompt: no BOS to add
  EXPECT_EQ(chat_format_from_name("glm4moe").name, "glm4.5");
  EXPECT_EQ(render_chat(f, kConv, true),
            "[gMASK]<sop><|system|>\nYou are terse.<|user|>\nHi<|assistant|>\n<think></think>"
            "\nHello.<|user|>\n2+2?<|assistant|>");
  // Reasoning in "<think>..</think>" is kept after the last user message only, stripped.
  const std::vector<ChatMessage> last = {{"user", "Q"},
                                         {"assistant", "<think>\n plan \n</think>\n\n A \n"}};
  EXPECT_EQ(render_chat(f, last, false),
            "[gMASK]<sop><|user|>\nQ<|assistant|>\n<think>plan</think>\nA");
  const std::vector<ChatMessage> past = {
      {"user", "Q"}, {"assistant", "<think>plan</think>A"}, {"user", "Q2"}};
  EXPECT_EQ(render_chat(f, past, true),
            "[gMASK]<sop><|user|>\nQ<|assistant|>\n<think></think>\nA<|user|>\nQ2<|assistant|>");
  // A blank answer writes only the think block.
  const std::vector<ChatMessage> blank = {{"user", "Q"}, {"assistant", "  "}};
  EXPECT_EQ(render_chat(f, blank, false), "[gMASK]<sop><|user|>\nQ<|assistant|>\n<think></think>");
  const std::vector<ChatMessage> tool = {{"tool", "{}"}};
  EXPECT_THROW(render_chat(f, tool, false), Error);
}

// gpt-oss's template (chat_template.jinja of the releases; llama.cpp's
// models/templates/openai-gpt-oss-120b.jinja) written out by hand for these turns.
TEST(ChatRender, HarmonyForGptOss) {
  ChatFormat f = chat_format_from_name("gpt-oss");
  EXPECT_EQ(f.family, ChatFamily::kHarmony);
  f.date = "2026-12-01";
  const std::string sys =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: 2026-12-01\n\nReasoning: medium\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.<|end|>";
  EXPECT_EQ(render_chat(f, kConv, true),
            sys +
                "<|start|>developer<|message|># Instructions\n\nYou are terse.\n\n<|end|>"
                "<|start|>user<|message|>Hi<|end|>"
                "<|start|>assistant<|channel|>final<|message|>Hello.<|end|>"
                "<|start|>user<|message|>2+2?<|end|><|start|>assistant");
  // Without a system message there is no developer message; a last assistant turn without a
  // generation prompt ends with <|return|>.
  const std::vector<ChatMessage> m = {{"user", "Hi"}, {"assistant", "Hello."}};
  EXPECT_EQ(render_chat(f, m, false),
            sys +
                "<|start|>user<|message|>Hi<|end|>"
                "<|start|>assistant<|channel|>final<|message|>Hello.<|return|>");
  EXPECT_FALSE(f.renders_bos());
  // Today's date (UTC) when none is set: YYYY-MM-DD after "Current date: ".
  f.date.clear();
  const std::string today = render_chat(f, m, true);
  const size_t at = today.find("Current date: ");
  ASSERT_NE(at, std::string::npos);
  const std::string d = today.substr(at + 14, 10);
  EXPECT_EQ(d.size(), 10u);
  EXPECT_EQ(d[4], '-');
  EXPECT_EQ(d[7], '-');
  const std::vector<ChatMessage> tool = {{"tool", "{}"}};
  EXPECT_THROW(render_chat(f, tool, true), Error);
}

// MiniMax-M2's template (llama.cpp's models/templates/MiniMax-M2.jinja) written out by hand for
// these turns, and checked against Jinja2 with Hugging Face's trim_blocks / lstrip_blocks.
TEST(ChatRender, MinimaxM2) {
  const auto f = chat_format_from_template(kMinimaxM2Template, "]~!b[", "[e~[");
  EXPECT_EQ(f.family, ChatFamily::kMinimaxM2);
  EXPECT_TRUE(f.renders_bos());  // "]~!b[" (its BOS) leads every prompt: no BOS to add
  EXPECT_EQ(f.default_system,
            "You are a helpful assistant. Your name is MiniMax-M2 and is built by MiniMax.");
  EXPECT_EQ(chat_format_from_name("minimax").name, "minimax-m2");
  EXPECT_EQ(render_chat(f, kConv, true),
            "]~!b[]~b]system\nYou are terse.[e~[\n]~b]user\nHi[e~[\n]~b]ai\nHello.[e~[\n"
            "]~b]user\n2+2?[e~[\n]~b]ai\n<think>\n");
  // Without a system message (or with an empty one) the model identity; the template's own
  // fallback when it names none. A later system message is not rendered.
  const ChatFormat plain = chat_format_from_name("minimax-m2");
  const std::vector<ChatMessage> later = {{"system", ""}, {"user", "Q"}, {"system", "later"}};
  EXPECT_EQ(render_chat(plain, later, true),
            "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nQ[e~[\n]~b]ai\n"
            "<think>\n");
  // Reasoning is split off as the template splits it ('\n' stripped, spaces kept) and written
  // after the last user message only.
  const std::vector<ChatMessage> last = {{"user", "Q"},
                                         {"assistant", "<think>\n plan \n</think>\n\n A \n"}};
  EXPECT_EQ(render_chat(plain, last, false),
            "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nQ[e~[\n]~b]ai\n"
            "<think>\n plan \n</think>\n\n A [e~[\n");
  const std::vector<ChatMessage> past = {
      {"user", "Q"}, {"assistant", "<think>plan</think>A"}, {"user", "Q2"}};
  EXPECT_EQ(render_chat(plain, past, true),
            "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nQ[e~[\n]~b]ai\n"
            "A[e~[\n]~b]user\nQ2[e~[\n]~b]ai\n<think>\n");
  const std::vector<ChatMessage> two = {{"user", "Q"},
                                        {"assistant", "x<think>a\n</think>b</think>\nc\n"}};
  EXPECT_EQ(render_chat(plain, two, false),
            "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nQ[e~[\n]~b]ai\n"
            "<think>\na\n</think>\n\nc[e~[\n");
  const std::vector<ChatMessage> tool = {{"tool", "{}"}};
  EXPECT_THROW(render_chat(plain, tool, true), Error);
}

// dots.llm1.inst, as llama.cpp's and ik_llama.cpp's built-in renderer writes these turns, with
// the default system text first when the conversation has none.
TEST(ChatRender, Dots1) {
  const auto f = chat_format_from_template(kDots1Template, "", "<|endofresponse|>");
  EXPECT_EQ(f.family, ChatFamily::kDots1);
  EXPECT_FALSE(f.renders_bos());
  EXPECT_EQ(chat_format_from_name("dots").name, "dots1");
  EXPECT_EQ(render_chat(f, kConv, true),
            "<|system|>You are terse.<|endofsystem|><|userprompt|>Hi<|endofuserprompt|>"
            "<|response|>Hello.<|endofresponse|><|userprompt|>2+2?<|endofuserprompt|>"
            "<|response|>");
  const std::vector<ChatMessage> plain = {{"user", "Q"}};
  EXPECT_EQ(render_chat(f, plain, false),
            "<|system|>You are a helpful assistant.<|endofsystem|><|userprompt|>Q"
            "<|endofuserprompt|>");
  const std::vector<ChatMessage> tool = {{"tool", "{}"}};
  EXPECT_THROW(render_chat(f, tool, true), Error);
}

// Ling 2.0: the expected strings are what Jinja2 (trim_blocks, lstrip_blocks, as HF renders)
// gives for the released template (Ling-mini-2.0's chat_template, tools left out) on the same
// messages: the "detailed thinking off" system turn always, a first system message's text
// before it, reasoning kept only after the last user message, later system messages and tool
// turns as the template writes them.
TEST(ChatRender, Ling2) {
  const auto f = chat_format_from_template(kLing2Template, "", "<|role_end|>");
  EXPECT_EQ(f.family, ChatFamily::kLing2);
  EXPECT_FALSE(f.renders_bos());
  EXPECT_EQ(chat_format_from_name("bailingmoe2").name, "ling2");
  EXPECT_EQ(render_chat(f, kConv, true),
            "<role>SYSTEM</role>You are terse.\ndetailed thinking off<|role_end|>"
            "<role>HUMAN</role>Hi<|role_end|><role>ASSISTANT</role>Hello.<|role_end|>"
            "<role>HUMAN</role>2+2?<|role_end|><role>ASSISTANT</role>");
  const std::vector<ChatMessage> think = {{"user", "Q1"},
                                          {"assistant", "<think>\nr1\n</think>\n\nA1"},
                                          {"user", "Q2"},
                                          {"assistant", "<think>\n\nr2\n\n</think>\n\nA2"}};
  EXPECT_EQ(render_chat(f, think, false),
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Q1<|role_end|>"
            "<role>ASSISTANT</role>A1<|role_end|><role>HUMAN</role>Q2<|role_end|>"
            "<role>ASSISTANT</role>\n<think>\nr2\n</think>\n\nA2<|role_end|>");
  // A user message that wraps a tool response is not the last query.
  const std::vector<ChatMessage> wrapped = {{"user", "Q"},
                                            {"assistant", "x<think>\n\nr\n</think>\n\nA"},
                                            {"user", "<tool_response>z</tool_response>"},
                                            {"assistant", "<think>r2</think>A2"}};
  EXPECT_EQ(render_chat(f, wrapped, false),
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Q<|role_end|>"
            "<role>ASSISTANT</role>\n<think>\nr\n</think>\n\nA<|role_end|><role>HUMAN</role>"
            "<tool_response>z</tool_response><|role_end|><role>ASSISTANT</role>\n<think>\nr2\n"
            "</think>\n\nA2<|role_end|>");
  const std::vector<ChatMessage> tools = {
      {"user", "Q"}, {"system", "S2"}, {"tool", "T1"}, {"tool", "T2"}, {"assistant", "A"}};
  EXPECT_EQ(render_chat(f, tools, true),
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Q<|role_end|>"
            "<role>SYSTEM</role>S2<|role_end|><role>OBSERVATION</role>\n<tool_response>\nT1\n"
            "</tool_response>\n<tool_response>\nT2\n</tool_response><|role_end|>"
            "<role>ASSISTANT</role>A<|role_end|><role>ASSISTANT</role>");
  const std::vector<ChatMessage> other = {{"developer", "x"}};
  EXPECT_THROW(render_chat(f, other, true), Error);
}

// Hunyuan-A13B-Instruct: the strings are what Jinja2 renders from the has_head template for
// the same messages (a system head, then the user turn without its own <|startoftext|>; a
// user-first conversation; an empty head).
TEST(ChatRender, HunyuanMoe) {
  const auto f = chat_format_from_template(kHunyuanMoeTemplate, "<|startoftext|>", "<|eos|>");
  EXPECT_EQ(f.family, ChatFamily::kHunyuanMoe);
  EXPECT_TRUE(f.renders_bos());
  EXPECT_EQ(chat_format_from_name("hunyuan").name, "hunyuan-moe");
  EXPECT_EQ(render_chat(f, kConv, true),
            "<|startoftext|>You are terse.<|extra_4|>Hi<|extra_0|>Hello.<|eos|>"
            "<|startoftext|>2+2?<|extra_0|>");
  const std::vector<ChatMessage> plain = {{"user", "Q"}, {"assistant", "A"}, {"user", "R"}};
  EXPECT_EQ(render_chat(f, plain, true),
            "<|startoftext|>Q<|extra_0|>A<|eos|><|startoftext|>R<|extra_0|>");
  const std::vector<ChatMessage> empty_head = {{"system", ""}, {"user", "Q"}};
  EXPECT_EQ(render_chat(f, empty_head, true), "<|startoftext|><|startoftext|>Q<|extra_0|>");
  const std::vector<ChatMessage> tool = {{"tool", "{}"}};
  EXPECT_THROW(render_chat(f, tool, true), Error);
}

}  // namespace
}  // namespace lynx
