// A model file in either of ag's two formats, as the checkpoint entries a model's loader reads —
// what the seq2seq models (models/seq2seq_file.h) and the language model (models/lm_file.h)
// share, so each says only which settings it writes and reads:
//   PATH.safetensors  the weights under their names (io/safetensors.h) and every setting as a
//                     __metadata__ string ("config.num_hiddens": "32"), with "format": "pt"
//   anything else     ag's checkpoint format (io/checkpoint.h), kind "model", the weights under
//                     "model."
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "nn/module.h"

namespace ag {

bool is_safetensors_path(const std::string& path);  // ends in ".safetensors"

// A model file read: its settings and weights as checkpoint entries (the weights under "model."),
// and the safetensors file when it is one, to load the weights by name with load_safetensors.
struct ModelFile {
  Checkpoint entries;
  std::optional<Safetensors> safetensors;
};
// Reads either format; any failure is a CheckpointError naming the file. A safetensors file's
// metadata becomes typed entries, strictly: a name in `integer_names` must be all digits, a name
// in `real_names` a number; `string_names` are taken as they are; other metadata is left out.
ModelFile read_model_file(const std::string& path, const std::set<std::string>& integer_names,
    const std::set<std::string>& real_names, const std::set<std::string>& string_names);

// The same from a file's bytes already in memory (the fuzzer's way in; tests/fuzz/): `source`
// names it in errors and, by its ending, gives the format.
ModelFile parse_model_file(std::string_view bytes, const std::string& source,
    const std::set<std::string>& integer_names, const std::set<std::string>& real_names,
    const std::set<std::string>& string_names);

// Loads the weights of `file` into `model`, strictly (every name, shape and dtype must match):
// from the safetensors file by name (buffers a safetensors file leaves out, such as positional
// tables, stay the model's own), or from the entries under "model.".
void load_model_weights(nn::Module& model, const ModelFile& file, const std::string& path);

// Writes `settings` (its strings, integers and reals; integers in decimal and reals with the 17
// digits that give the same double back, when they become metadata) and the weights of `model`,
// atomically. Any failure is a CheckpointError. `format` applies to ag's format only.
SaveResult save_model_file(const std::string& path, const nn::Module& model, Checkpoint settings,
    CheckpointFormat format = CheckpointFormat::binary);

}  // namespace ag
