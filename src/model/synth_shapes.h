// The shapes `lynx-moe synth` knows (synth_shapes.cc): each a released model's config, or a
// small one for tests; lynx/synth.h looks them up by name.
#pragma once
#include <span>

#include "lynx/synth.h"

namespace lynx {

std::span<const SynthShape> synth_shapes();

}  // namespace lynx
