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
// dtypes: F32 and F64 are read and written as they are; I64 (token ids, lengths) is read into
// float64 (whole numbers up to 2^53 in magnitude; larger ones are refused, float64 could not hold
// them) and written for the tensors the caller names; F16 and BF16 are read into float32.
//
// A damaged or hostile file is refused with a SafetensorsError naming the file and the problem:
// a header length past the file or over 100 MB, malformed JSON, a duplicate name, an unknown
// dtype, a shape whose size does not match its byte range, ranges that overlap, leave gaps or run
// past the file. Everything is checked before any tensor is allocated, so a file never makes the
// reader allocate more than its own size (twice that for F16/BF16, widened to float32).
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/error.h"
#include "autograd/tensor.h"

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
  std::set<std::string> int64_names;            // stored as I64 (their values must be whole)
};

// Writes the tensors in the given order (names must be unique and not "__metadata__"); the file
// appears whole or not at all (a temporary file, then rename).
void write_safetensors(const std::string& path,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const SafetensorsWriteOptions& options = {});
std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
    const SafetensorsWriteOptions& options = {});

}  // namespace ag
