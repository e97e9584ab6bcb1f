// Helpers shared by the commands: model loading with a progress bar, list flags, timing.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lynx/model.h"
#include "util/clock.h"

namespace CLI {
class App;
}

namespace lynx::cli {

// Adds --exact-acts (ContextOptions::exact_activations) to a command that creates a Context.
void add_exact_acts_flag(CLI::App* cmd, bool* exact_activations);

// Loads a model, drawing a progress bar on stderr while the file is read ahead (only when
// stderr is a terminal or the file is large). `repack`: LoadOptions::repack; commands pass
// false with --exact-acts, whose float path would read repacked Q8_0/Q4_0 weights through a
// copy back to rows (slower than rows: docs/benchmarks.md). `repack_float`:
// LoadOptions::repack_float.
std::unique_ptr<Model> load_model(const std::string& path, bool repack = true,
                                  bool repack_float = true);

// "1,2,4" -> {1, 2, 4}; throws lynx::Error naming `flag` on a malformed item.
std::vector<int> parse_int_list(const std::string& s, const std::string& flag);
// Splits routing specs: "topk;lynx:alpha=3,beta=4" or "topk,lynx,oea:k0=4". A comma starts a
// new spec only when what follows looks like a policy name (no '=' before the next ',' or
// ';'), so parameters keep their commas.
std::vector<std::string> split_specs(const std::string& s);

using util::now_seconds;

}  // namespace lynx::cli
