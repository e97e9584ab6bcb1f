// Seed-OSS (ByteDance-Seed/Seed-OSS-36B-Instruct): Qwen3-Coder's function body in its own
// block, one function per block, values written as they are (its template writes a string as it
// is, any other value by Jinja's `string` filter, with no newlines around it):
// "<seed:tool_call>\n<function=NAME>\n<parameter=KEY>VALUE</parameter>\n..</function>\n
// </seed:tool_call>". Its reasoning is <seed:think>..</seed:think> (OutputFormat's think tags).
#include "chatparse/formats.h"

namespace lynx::chatparse::detail {

bool parse_seed_oss(std::string_view body, const ParseOptions& o, std::vector<RawCall>& out,
                    std::string& why) {
  return parse_function_call(body, o, false, out, why);
}

}  // namespace lynx::chatparse::detail
