// Importance matrices (`lynx-moe imatrix`, `lynx-moe quantize --imatrix`): per weight matrix,
// the sum over the tokens of a text of the squared activations entering each input column,
// per expert for expert tensors, with the number of rows summed. A quantizer weights the
// squared error of each weight by its column's mean square activation, so the columns that
// carry large activations are kept more precisely (what llama.cpp's imatrix does).
//
// Files: the GGUF format llama.cpp's llama-imatrix writes since mid-2025 (general.type
// "imatrix", per tensor `<name>.in_sum2` F32 [cols, n_mat] and `<name>.counts` F32 [1, n_mat],
// keys imatrix.datasets / chunk_count / chunk_size), and the legacy binary `.dat` format of
// earlier llama.cpp releases (per entry: name, ncall, values = mean square * ncall). Both are
// read and written; the legacy format keeps no per-expert counts.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lynx/context.h"
#include "lynx/model.h"

namespace lynx {

struct ImatrixEntry {
  std::vector<double> in_sum2;  // [n_mat x cols]: sum of x^2 per matrix and input column
  // [n_mat] rows summed per matrix; a single count stands for every matrix (legacy files).
  std::vector<int64_t> counts;
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name (sorted, as written)
  std::vector<std::string> datasets;            // the text files it was computed on
  uint32_t chunk_count = 0;                     // chunks of text evaluated
  uint32_t chunk_size = 0;                      // tokens per chunk

  // The importance of each column of matrix `mat` (0 for 2D tensors, the expert for 3D
  // ones) of tensor `name` with `cols` columns and `n_mat` matrices: the mean square
  // activation in_sum2 / count. Empty when the file has no entry for the tensor, or no row
  // for that matrix (an expert the text never routed to). Throws lynx::Error when the entry
  // does not fit the tensor's shape.
  std::vector<float> importance(const std::string& name, int64_t mat, int64_t cols,
                                int64_t n_mat) const;
};

// Reads a GGUF or a legacy imatrix file (told apart by the GGUF magic). Throws lynx::Error
// naming the file and the defect: truncated data, sums without counts, a shape that does not
// fit, negative or non-finite values, no entry at all.
Imatrix read_imatrix(const std::string& path);
// Writes the GGUF format (llama.cpp's current one).
void write_imatrix_gguf(const Imatrix& im, const std::string& path);
// Writes the legacy `.dat` format (what llama.cpp releases before the GGUF format read):
// values = in_sum2 / count * ncall with ncall = ceil(max count / chunk_size).
void write_imatrix_dat(const Imatrix& im, const std::string& path);

// Accumulates an importance matrix from the steps a Context runs (Context::
// set_activation_hook): every product with a weight matrix of the model adds its input rows,
// as llama.cpp's collector does: dense products of fewer than 16 rows are skipped (decode
// steps), expert products always count; output.weight only with `process_output`.
class ImatrixCollector {
 public:
  ImatrixCollector(const Model& model, bool process_output = false);
  ~ImatrixCollector();
  // Installs the hook on ctx (which must run this collector's model) until detach or the
  // collector's end; the collector must outlive the steps it sees.
  void attach(Context& ctx);
  void detach(Context& ctx);
  // One product's input rows (what the hook receives).
  void add(const Weight& w, const float* x, int64_t n_rows, std::span<const int32_t> per_expert);
  const Imatrix& imatrix() const { return im_; }
  Imatrix& imatrix() { return im_; }

 private:
  struct Names;
  std::unique_ptr<Names> names_;
  Imatrix im_;
};

struct ImatrixOptions {
  int n_ctx = 512;     // tokens per chunk (each chunk is a new sequence, as llama-imatrix)
  int max_chunks = 0;  // 0: every whole chunk of the text
  int n_threads = 0;
  bool process_output = false;
  std::string dataset;  // recorded in imatrix.datasets
  // Called after each chunk with the chunks done and total, and the running perplexity of
  // the chunks' second halves (llama-imatrix's estimate).
  std::function<void(int done, int total, double ppl)> progress;
};

// Runs the model over `tokens` in chunks of n_ctx (each a fresh sequence whose first token is
// replaced by BOS when the vocabulary adds one, bos >= 0) and returns the importance matrix.
// Throws lynx::Error when the text holds less than one chunk.
Imatrix compute_imatrix(const Model& model, const std::vector<int32_t>& tokens, int32_t bos,
                        const ImatrixOptions& opts);

}  // namespace lynx
