// libFuzzer target for the safetensors reader: every input must either parse or throw
// ag::SafetensorsError. A parsed file must be plausible (no tensor with more elements than the
// input has bytes) and survive being written and read again (the same names in the same order,
// the same metadata, the same values bit for bit). Anything else is a finding, as in
// fuzz_checkpoint.cpp. Build and run with tests/fuzz/run.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "io/safetensors.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "ag-fuzz-safetensors: %s\n", what.c_str());
  std::abort();
}

bool same_bits(const ag::Tensor& a, const ag::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const std::size_t bytes = static_cast<std::size_t>(a.numel()) * ag::dtype_size(a.dtype());
  return bytes == 0 || std::memcmp(a.raw_data(), b.raw_data(), bytes) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  ag::Safetensors file;
  try {
    file = ag::parse_safetensors(input);
  } catch (const ag::SafetensorsError&) {
    return 0;  // the expected outcome for a damaged input
  }
  for (const auto& [name, t] : file.tensors)
    if (!t.defined() || static_cast<uint64_t>(t.numel()) > size)
      finding("tensor '" + name + "' has " + std::to_string(t.numel()) + " elements from " +
              std::to_string(size) + " bytes");
  ag::SafetensorsWriteOptions options;
  options.metadata = file.metadata;
  ag::Safetensors back;
  try {
    back = ag::parse_safetensors(ag::serialize_safetensors(file.tensors, options));
  } catch (const ag::Error& e) {
    finding(std::string("a file that parsed does not survive writing and reading: ") + e.what());
  }
  bool same = back.metadata == file.metadata && back.tensors.size() == file.tensors.size();
  for (std::size_t i = 0; same && i < file.tensors.size(); ++i)
    same = back.tensors[i].first == file.tensors[i].first &&
           same_bits(back.tensors[i].second, file.tensors[i].second);
  if (!same) finding("a file changed when written and read again");
  return 0;
}
