// libFuzzer target for the .npy reader: every input must either parse or throw ag::NpyError; a
// parsed array must be plausible (no more elements than the input has bytes) and survive being
// written and read again bit for bit. Anything else is a finding, as in fuzz_checkpoint.cpp.
// Build and run with tests/fuzz/run.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "io/npy.h"

namespace {
[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "ag-fuzz-npy: %s\n", what.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  ag::Tensor t;
  try {
    t = ag::parse_npy(input);
  } catch (const ag::NpyError&) {
    return 0;  // the expected outcome for a damaged input
  }
  if (!t.defined() || static_cast<uint64_t>(t.numel()) > size)
    finding("an array of " + std::to_string(t.numel()) + " elements from " + std::to_string(size) +
            " bytes");
  ag::Tensor back;
  try {
    back = ag::parse_npy(ag::serialize_npy(t));
  } catch (const ag::Error& e) {
    finding(std::string("an array that parsed does not survive writing and reading: ") + e.what());
  }
  const std::size_t bytes = static_cast<std::size_t>(t.numel()) * ag::dtype_size(t.dtype());
  if (back.dtype() != t.dtype() || back.shape() != t.shape() ||
      (bytes > 0 && std::memcmp(back.raw_data(), t.raw_data(), bytes) != 0))
    finding("an array changed when written and read again");
  return 0;
}
