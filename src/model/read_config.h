// Stage 1 of loading, on its own: a GGUF file's architecture resolved to a ModelConfig from its
// metadata and the family's description (src/model/arch/), layer kinds included. Model::load
// runs it before binding the weights; convert runs it on the metadata it is about to write (with
// a stand-in for each tensor the checkpoint has), so that which tensors each layer has comes
// from the description and nowhere else.
#pragma once
#include "lynx/gguf.h"
#include "lynx/model.h"

namespace lynx {

// Throws lynx::Error naming the key for bad or missing metadata.
ModelConfig read_config(const gguf::File& f);

}  // namespace lynx
