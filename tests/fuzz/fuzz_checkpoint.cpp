// libFuzzer target for the checkpoint reader: every input must either parse to a plausible
// checkpoint or throw ag::CheckpointError, and so must reading the optimizer state from a parsed
// checkpoint (ag::get_optimizer_state, as ag-train does). Anything else is a finding:
//   - a crash, or an ASan/UBSan report (the library is built with both);
//   - any other exception (it escapes LLVMFuzzerTestOneInput: std::terminate, reported as a crash);
//   - an allocation over -malloc_limit_mb, a run over -timeout;
//   - a parsed checkpoint that is implausible (a tensor with more elements than the input has
//     bytes, a shape whose size overflows) or that does not survive being written and read
//     again in the same format (abort() with a message).
// The first byte of the input chooses file, binary payload or JSON payload: see fuzz_input.h.
// Build and run with tests/fuzz/run.sh.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "io/checkpoint.h"
#include "io/optimizer_state.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "ag-fuzz-checkpoint: %s\n", what.c_str());
  std::abort();
}

// Bit for bit, except that a JSON round trip keeps only that a NaN is a NaN.
bool same_double(double a, double b, bool json) {
  if (json && std::isnan(a)) return std::isnan(b);
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

void check_plausible(const ag::Checkpoint& c, std::size_t input_size) {
  for (const auto& [name, t] : c.tensors) {
    if (!t.defined()) finding("tensor '" + name + "' is undefined");
    int64_t span = 1;
    bool has_zero = false;
    for (int64_t size : t.shape()) {
      if (size < 0) finding("tensor '" + name + "' has a negative dim");
      has_zero = has_zero || size == 0;
      if (__builtin_mul_overflow(span, size > 0 ? size : 1, &span))
        finding("tensor '" + name + "': the product of its dims overflows int64");
    }
    if (t.numel() != (has_zero ? 0 : span))
      finding("tensor '" + name + "': numel does not match its shape");
    if (static_cast<uint64_t>(t.numel()) > input_size)
      finding("tensor '" + name + "' has " + std::to_string(t.numel()) + " elements from " +
              std::to_string(input_size) + " bytes");
    const ag::Tensor& tensor = t;  // (a lambda cannot capture a structured binding in clang 14)
    const std::size_t read =
        ag::dispatch_all(t.dtype(), [&]<typename T>() { return tensor.to_vector<T>().size(); });
    if (read != static_cast<std::size_t>(t.numel())) finding("tensor '" + name + "' is unreadable");
    // A bool's bytes are 0 or 1 (any other byte in a C++ bool is undefined behaviour).
    if (t.dtype() == ag::bool_) {
      const ag::Tensor dense = t.contiguous();
      const auto* bytes = static_cast<const unsigned char*>(dense.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i)
        if (bytes[i] > 1) finding("bool tensor '" + name + "' holds a byte other than 0 or 1");
    }
  }
}

void check_round_trip(const ag::Checkpoint& c, ag::CheckpointFormat format) {
  const bool json = format == ag::CheckpointFormat::json;
  ag::Checkpoint back;
  try {
    back = ag::parse_checkpoint(ag::serialize_checkpoint(c, format));
  } catch (const ag::CheckpointError& e) {
    finding(std::string("a checkpoint that parsed does not survive writing and reading again: ") +
            e.what());
  }
  bool same = back.kind == c.kind && back.integers == c.integers && back.strings == c.strings &&
              back.tensors.size() == c.tensors.size() && back.reals.size() == c.reals.size();
  for (auto a = c.reals.begin(), b = back.reals.cbegin(); same && a != c.reals.end(); ++a, ++b)
    same = a->first == b->first && same_double(a->second, b->second, json);
  for (auto a = c.tensors.begin(), b = back.tensors.cbegin(); same && a != c.tensors.end();
       ++a, ++b) {
    same = a->first == b->first && a->second.dtype() == b->second.dtype() &&
           a->second.shape() == b->second.shape();
    if (!same) break;
    if (!ag::is_floating_point(a->second.dtype())) {  // int64 and bool: exact, in every format
      same = a->second.to_vector<int64_t>() == b->second.to_vector<int64_t>();
      continue;
    }
    const std::vector<double> va = a->second.to_vector<double>(),
                              vb = b->second.to_vector<double>();
    for (std::size_t i = 0; same && i < va.size(); ++i) same = same_double(va[i], vb[i], json);
  }
  if (!same) finding("a checkpoint changed when written and read again");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const ag_fuzz::Mode mode = ag_fuzz::mode_of(data[0]);
  ag::Checkpoint c;
  ag::CheckpointFormat format = ag::CheckpointFormat::binary;
  try {
    switch (mode) {
      case ag_fuzz::Mode::file:
        c = ag::parse_checkpoint(input);
        // The header's encoding field (byte 12) says which format it was.
        format = input[12] == 0 ? ag::CheckpointFormat::binary : ag::CheckpointFormat::json;
        break;
      case ag_fuzz::Mode::binary_payload:
        c = ag::parse_checkpoint_payload(input.substr(1), ag::CheckpointFormat::binary);
        break;
      case ag_fuzz::Mode::json_payload:
        format = ag::CheckpointFormat::json;
        c = ag::parse_checkpoint_payload(input.substr(1), ag::CheckpointFormat::json);
        break;
    }
  } catch (const ag::CheckpointError&) {
    return 0;  // the expected outcome for a damaged input
  }
  check_plausible(c, size);
  check_round_trip(c, format);
  try {
    ag::get_optimizer_state(c);
  } catch (const ag::CheckpointError&) {
    // entries that are no optimizer state: expected
  }
  return 0;
}
