// The weight type table (types.h): one row per type the engine computes with.
#include "kernels/types.h"

#include "kernels/kernels.h"
#include "lynx/error.h"

namespace lynx::kernels {

const TypeTraits* find_type_traits(TensorType t) {
  return type_row(t);
}

const TypeTraits& type_traits(TensorType t) {
  const TypeTraits* tr = find_type_traits(t);
  if (!tr) {
    throw Error(std::string("kernels: unsupported weight type ") + gguf::tensor_type_name(t) +
                " (the engine computes with " + compute_type_names() + ")");
  }
  return *tr;
}

std::span<const TypeTraits> all_type_traits() {
  return kTypeTable;
}

std::string compute_type_names() {
  std::string out;
  for (const auto& tr : kTypeTable) {
    if (!out.empty()) out += ", ";
    out += gguf::tensor_type_name(tr.type);
  }
  return out;
}

}  // namespace lynx::kernels
