// How a fuzz input is read, shared by the fuzzer (fuzz_checkpoint.cpp) and the seed writer
// (fuzz_seeds.cpp).
//
// The first byte chooses what the input is:
//   0x89 (the first byte of ag's magic number)  the whole input is a checkpoint file
//                                                → ag::parse_checkpoint
//   any other even byte                          the rest is a binary payload
//                                                → ag::parse_checkpoint_payload(binary)
//   any other odd byte                           the rest is a JSON payload
//                                                → ag::parse_checkpoint_payload(json)
// so that a checkpoint file is a seed as it is, and payloads get past the CRC.
#pragma once

#include <cstdint>

namespace ag_fuzz {

constexpr unsigned char kWholeFile = 0x89;
constexpr unsigned char kBinaryPayload = 0x00;  // (any even byte)
constexpr unsigned char kJsonPayload = 0x01;    // (any odd byte but 0x89)

enum class Mode { file, binary_payload, json_payload };

inline Mode mode_of(unsigned char selector) {
  if (selector == kWholeFile) return Mode::file;
  return selector % 2 == 0 ? Mode::binary_payload : Mode::json_payload;
}

}  // namespace ag_fuzz

// ag-fuzz-text (fuzz_text.cpp): the first byte modulo 3 chooses the parser of the rest.
namespace ag_fuzz::text {
constexpr unsigned char kUtf8 = 0;   // decode_utf8, then the tokenizers and preprocess_nmt
constexpr unsigned char kVocab = 1;  // Vocab::deserialize
constexpr unsigned char kPairs = 2;  // parse_pairs (d2l's fra.txt)
}  // namespace ag_fuzz::text

// ag-fuzz-model-file (fuzz_model_file.cpp): the first byte's bit 0 chooses the format of the rest
// (0: ag's checkpoint format, 1: safetensors), bit 1 the loader (0: seq2seq::load_model_bytes, the
// toy tasks' and translation's models; 1: lm::load_model_bytes, the language model's).
namespace ag_fuzz::model_file {
constexpr unsigned char kSafetensors = 1;
constexpr unsigned char kLanguageModel = 2;
}  // namespace ag_fuzz::model_file
