// The JSON encoding of a checkpoint's payload (io/checkpoint_json.cpp), and the guards its reader
// shares with the binary one (io/checkpoint.cpp): every error is a CheckpointError naming the
// source, and every count read from a file is charged against the bytes it holds. The file format
// around the payload — header, CRC, atomic save — is io/checkpoint.cpp's.
// Internal to ag::io: not installed, included by those two files only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "autograd/tensor.h"
#include "io/checkpoint.h"

namespace ag::checkpoint_payload {

// ---- the JSON payload (cereal's JSON archive) ---------------------------------------------------

// The layout write_json produces, and the only one read_json accepts:
//   {"kind": string,
//    "tensors": [{"name": string, "dtype": string, "shape": [number…], "data": [number…]}…],
//      (dtype "float32", "float64", "int64" or "bool"; an int64's data are integers, written and
//      read exactly — not through a double —, a bool's are 0 and 1)
//    "integers": [{"name": string, "value": number}…], "reals": (the same),
//    "strings": [{"name": string, "value": string}…]}
std::string write_json(const Checkpoint& checkpoint);
// Reads the payload in one pass of rapidjson's event parser, with no document tree: over-deep
// nesting, NUL characters in strings, and anything but that layout and its value types are
// refused; numbers are converted by std::from_chars, exactly and range-checked; what it holds is
// charged to a Budget as it goes. The keys of an object may come in any order (a tensor's data
// before its dtype or shape waits as its text, charged to the Budget, until they come).
Checkpoint read_json(std::string_view payload, const std::string& source);

// ---- what both readers share --------------------------------------------------------------------

[[noreturn]] inline void fail(const std::string& source, const std::string& what) {
  throw CheckpointError("checkpoint " + source + ": " + what);
}

// Every length read from the file is charged against the bytes of the payload: nothing claims
// more than the file holds, so no count allocates more than the file's size. And every entry read
// is charged what it will hold in memory — its data and kEntryBytes of bookkeeping (a tensor's
// object, shape and storage, its name, its map node: 630 bytes measured for a one-element tensor)
// — against kMemoryFactor × the payload + kMemorySlack: 2 million one-element tensors in an 86 MB
// file held 1.26 GB before, and are refused now once they pass 494 MB.
class Budget {
 public:
  static constexpr uint64_t kEntryBytes = 640, kMemoryFactor = 4, kMemorySlack = uint64_t{64} << 20;

  Budget(uint64_t bytes, const std::string& source)
      : remaining_(bytes), memory_(kMemoryFactor * bytes + kMemorySlack), source_(source) {}
  void charge(uint64_t count, uint64_t bytes_each, const char* what) {
    if (bytes_each != 0 && count > remaining_ / bytes_each)
      fail(source_, std::string("damaged payload: ") + what + " claims " + std::to_string(count) +
                        " items, more than the file holds");
    remaining_ -= count * bytes_each;
  }
  // An entry read: `data_bytes` of values and its bookkeeping.
  void hold(uint64_t data_bytes, const char* what) { take(data_bytes + kEntryBytes, what); }
  // Bytes the reader holds besides entries (the JSON reader's data that waits for its shape).
  void take(uint64_t bytes, const char* what) {
    if (bytes > memory_)
      fail(source_, std::string("damaged payload: ") + what + " would hold more than " +
                        std::to_string(kMemoryFactor) + " × the payload's size + 64 MiB in memory");
    memory_ -= bytes;
  }

 private:
  uint64_t remaining_, memory_;
  const std::string& source_;
};

// The shape read from the file: its element count must fit the payload (checked by the caller
// against the budget), and even a zero-element shape must keep its strides — products of the
// sizes, zeros counted as ones — well inside int64.
constexpr uint64_t kMaxStrideProduct = uint64_t{1} << 48;

struct ShapeReader {
  Shape shape;
  uint64_t numel = 1;           // elements, saturating above the payload size
  uint64_t stride_product = 1;  // Π max(size, 1)
  void add(uint64_t size, std::size_t payload_size, const std::string& tensor,
      const std::string& source) {
    const uint64_t factor = std::max<uint64_t>(size, 1);
    if (factor > kMaxStrideProduct / stride_product)
      fail(source, "damaged payload: tensor '" + tensor + "' has an impossible shape (dim " +
                       std::to_string(shape.size()) + " of size " + std::to_string(size) + ")");
    stride_product *= factor;
    numel = size == 0 ? 0 : (numel > payload_size / size ? payload_size + 1 : numel * size);
    shape.push_back(static_cast<int64_t>(size));
  }
};

template <class Map, class Value>
void insert_unique(Map& map, std::string name, Value value, const std::string& source) {
  if (name.empty()) fail(source, "damaged payload: an entry has an empty name");
  if (!map.emplace(name, std::move(value)).second)
    fail(source, "damaged payload: entry '" + name + "' appears twice");
}

}  // namespace ag::checkpoint_payload
