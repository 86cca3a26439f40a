// safetensors files (Hugging Face's format, what PyTorch models are shared in), read and written
// exactly as the format says:
//
//   8 bytes   N, the header's length, an unsigned little-endian integer
//   N bytes   the header, JSON: {"__metadata__": {"key": "value", ...},
//                                "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
//                                ...}  (padded with spaces)
//   the rest  the tensors' bytes, little-endian, C order, tightly packed: tensor `name` is bytes
//             [b, e) of this part, and the ranges cover it with no gap and no overlap
//
// dtypes, as PyTorch's: F32, F64, I64 (torch.long: token ids, lengths — every int64, 2^63 − 1
// too) and BOOL (torch.bool: masks; one byte each, 0 or 1 — any other byte is refused) are read
// into and written from float32, float64, int64 and bool tensors as they are. F16 and BF16 are read
// into float32 (and not written). A tensor is written in its own dtype: to store floats that hold
// whole numbers as I64, convert them first — ag::tensor(x.to_vector<int64_t>(), x.shape()) refuses
// a value that is not a whole number, x.to(ag::int64) truncates it as PyTorch does.
// (Before int64 tensors existed, I64 was read into float64 and written for the names in a
// write option, int64_names; that option is gone.)
//
// A damaged or hostile file is refused with a SafetensorsError naming the file and the problem:
// a header length past the file or over 100 MB, malformed JSON, a duplicate name, an unknown
// dtype, a shape whose size does not match its byte range, ranges that overlap, leave gaps or run
// past the file. Everything is checked before any tensor is allocated, so a file never makes the
// reader allocate more than its own size (twice that for F16/BF16, widened to float32).
//
// Loading into a module (load_safetensors) is Module::load_state_dict's: an I64 or BOOL entry
// loads into an int64 or bool buffer as it is, and into a float parameter only when every value is
// exact in its dtype (an I64 file of whole-number weights); see nn/module.h.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/error.h"
#include "autograd/tensor.h"
#include "io/file.h"
#include "nn/module.h"

namespace ag {

class SafetensorsError : public IoError {
 public:
  using IoError::IoError;
};

// Tensors by name, in the order the file's header lists them, and the header's __metadata__.
struct Safetensors {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;

  const Tensor& at(const std::string& name) const;  // throws SafetensorsError naming what exists
  std::map<std::string, Tensor> as_map() const;     // for Module::load_state_dict
};

Safetensors read_safetensors(const std::string& path);
// The bytes of a whole file; `source` names it in errors.
Safetensors parse_safetensors(std::string_view bytes, const std::string& source = "<memory>");

struct SafetensorsWriteOptions {
  std::map<std::string, std::string> metadata;  // the header's __metadata__
};

// Writes the tensors in the given order (names must be unique and not "__metadata__"); the file
// appears whole or not at all (a temporary file, then rename).
WriteResult write_safetensors(const std::string& path,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const SafetensorsWriteOptions& options = {});
std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
    const SafetensorsWriteOptions& options = {});

// ---- modules: their state as PyTorch names it -----------------------------------------------

// What a module's safetensors file holds: its parameters and persistent buffers under their
// dotted names — PyTorch's model.state_dict() — so that torch's load_state_dict reads it and ag
// reads PyTorch's. Non-persistent buffers (PositionalEncoding.P, which d2l keeps out of its state
// dict as well) are neither written nor expected.
struct ModuleFileOptions {
  bool strict = true;  // load: every name must match, as Module::load_state_dict
  // The file's name for a module name (save) or the module's name for a file name (load);
  // e.g. d2l_name / from_d2l_name. Unset: the names as they are.
  std::function<std::string(const std::string&)> rename;
  std::map<std::string, std::string> metadata;  // save: the header's __metadata__
};

WriteResult save_safetensors(
    const nn::Module& module, const std::string& path, const ModuleFileOptions& options = {});
// Loads all or nothing when strict (a StateDictError naming the file and every missing,
// unexpected or mismatched entry); otherwise what fits, returning the problems. Returns the file's
// metadata through `metadata` when given.
std::vector<std::string> load_safetensors(nn::Module& module, const std::string& path,
    const ModuleFileOptions& options = {}, std::map<std::string, std::string>* metadata = nullptr);
// The same from a file already read; `source` names it in errors.
std::vector<std::string> load_safetensors(nn::Module& module, const Safetensors& file,
    const std::string& source, const ModuleFileOptions& options = {});

// d2l's PyTorch Transformer adds its blocks with nn.Sequential.add_module("block" + str(i)), so
// its names read "encoder.blks.block0.attention.W_q.weight" where ag's read
// "encoder.blks.0.attention.W_q.weight". Everything else is named alike.
std::string d2l_name(const std::string& ag_name);    // "blks.0." -> "blks.block0."
std::string from_d2l_name(const std::string& name);  // "blks.block0." -> "blks.0."

}  // namespace ag
