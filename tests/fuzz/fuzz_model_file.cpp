// libFuzzer target for model files (models/seq2seq_file.h, models/lm_file.h): what ag-predict and
// ag-generate load — the settings in a checkpoint's entries or a safetensors file's metadata
// (sizes, flags, the task, a toy task's vocabulary, translation's two vocabularies, a language
// model's tokenizer and vocabulary), checked, then the model built and its weights loaded. Every
// input must either load or throw ag::CheckpointError (a file ag refuses) or nn::StateDictError
// (weights that do not fit the model); the model's memory is limited to 32 MiB, so that a file
// can describe no model the fuzzer's 256 MB allocation limit would stop. Anything else — a crash, a
// sanitizer report, another exception, a hang — is a finding. Build and run with tests/fuzz/run.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "models/lm_file.h"
#include "models/seq2seq_file.h"
#include "nn/module.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  using namespace ag_fuzz::model_file;
  const unsigned char selector = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string source = selector & kSafetensors ? "fuzz.safetensors" : "fuzz.agm";
  const uint64_t max_bytes = uint64_t{32} << 20;
  try {
    if (selector & kLanguageModel)
      ag::lm::load_model_bytes(bytes, source, max_bytes);
    else
      ag::seq2seq::load_model_bytes(bytes, source, max_bytes);
  } catch (const ag::CheckpointError&) {
    return 0;  // the expected outcomes for a damaged input
  } catch (const ag::nn::StateDictError&) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(
        stderr, "ag-fuzz-model-file: an exception other than CheckpointError: %s\n", e.what());
    std::abort();
  }
  return 0;
}
