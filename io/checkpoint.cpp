// The checkpoint file format of io/checkpoint.h: the header and its CRC, the binary payload, and
// loading and saving whole files (atomically). The JSON payload is io/checkpoint_json.cpp's.
#include "io/checkpoint.h"

#include <zlib.h>

#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/string.hpp>
#include <cmath>
#include <cstring>
#include <iterator>
#include <sstream>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "io/checkpoint_json.h"

namespace ag {

namespace {

using checkpoint_payload::Budget;
using checkpoint_payload::fail;
using checkpoint_payload::insert_unique;
using checkpoint_payload::ShapeReader;

constexpr char kMagic[8] = {'\x89', 'A', 'G', 'C', '\r', '\n', '\x1a', '\n'};
constexpr uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderSize = 28;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_le(std::string_view bytes, std::size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}

// ---- the binary payload (cereal's portable binary archive) --------------------------------------

// Each tensor's dtype is one byte: its index here. 0 and 1 are what version 1 files have always
// held; 2 and 3 came with int64 and bool tensors (an older ag refuses them as unknown codes).
constexpr DType kDTypeCodes[] = {float32, float64, int64, bool_};

uint8_t dtype_code(DType dtype) {
  for (uint8_t code = 0; code < std::size(kDTypeCodes); ++code)
    if (kDTypeCodes[code] == dtype) return code;
  ag::fail<ValueError>("checkpoint: no dtype code for ", dtype_name(dtype));
}

void write_string(cereal::PortableBinaryOutputArchive& ar, const std::string& s) {
  ar(cereal::make_size_tag(static_cast<cereal::size_type>(s.size())));
  if (!s.empty()) ar(cereal::binary_data(const_cast<char*>(s.data()), s.size()));
}

std::string read_string(cereal::PortableBinaryInputArchive& ar, Budget& budget, const char* what) {
  cereal::size_type n = 0;
  ar(cereal::make_size_tag(n));
  budget.charge(n, 1, what);
  std::string s(static_cast<std::size_t>(n), '\0');
  if (n) ar(cereal::binary_data(s.data(), s.size()));
  return s;
}

uint64_t read_count(cereal::PortableBinaryInputArchive& ar, Budget& budget, uint64_t min_bytes_each,
    const char* what) {
  cereal::size_type n = 0;
  ar(cereal::make_size_tag(n));
  budget.charge(n, min_bytes_each, what);
  return n;
}

std::string write_binary(const Checkpoint& c) {
  std::ostringstream out(std::ios::binary);
  {
    cereal::PortableBinaryOutputArchive ar(out);
    write_string(ar, c.kind);
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(c.tensors.size())));
    for (const auto& [name, t] : c.tensors) {
      write_string(ar, name);
      ar(dtype_code(t.dtype()));
      ar(cereal::make_size_tag(static_cast<cereal::size_type>(t.dim())));
      for (int64_t size : t.shape()) ar(static_cast<uint64_t>(size));
      Tensor data = t.detach().contiguous();
      // The elements, a bool one byte 0 or 1. Typed, not as bytes: the portable archive swaps
      // each element's bytes by its size when writer and reader differ in byte order.
      dispatch_all(t.dtype(), [&]<typename T>() {
        if (data.numel() > 0)
          ar(cereal::binary_data(
              data.data<T>(), static_cast<std::size_t>(data.numel()) * sizeof(T)));
      });
    }
    auto write_numbers = [&](const auto& map) {
      ar(cereal::make_size_tag(static_cast<cereal::size_type>(map.size())));
      for (const auto& [name, v] : map) {
        write_string(ar, name);
        ar(v);
      }
    };
    write_numbers(c.integers);
    write_numbers(c.reals);
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(c.strings.size())));
    for (const auto& [name, v] : c.strings) {
      write_string(ar, name);
      write_string(ar, v);
    }
  }
  return out.str();
}

// An input stream over bytes held elsewhere (std::istringstream would copy them).
class ViewStream : public std::istream {
 public:
  explicit ViewStream(std::string_view bytes) : std::istream(&buffer_), buffer_(bytes) {}

 private:
  struct Buffer : std::streambuf {
    explicit Buffer(std::string_view bytes) {
      char* begin = const_cast<char*>(bytes.data());  // only read: get area of an input stream
      setg(begin, begin, begin + bytes.size());
    }
  } buffer_;
};

Checkpoint read_binary(std::string_view payload, const std::string& source) {
  // cereal's portable archive starts with its writer's byte order: 1 little-endian, 0 big-endian.
  if (payload.empty() || (payload[0] != 0 && payload[0] != 1))
    fail(source, "damaged payload: no valid byte-order mark");
  Budget budget(payload.size(), source);
  ViewStream in(payload);  // cereal reads the payload in place, without a copy of it
  Checkpoint c;
  cereal::PortableBinaryInputArchive ar(in);
  c.kind = read_string(ar, budget, "the kind");
  const uint64_t tensor_count = read_count(ar, budget, 2, "the tensor list");
  for (uint64_t i = 0; i < tensor_count; ++i) {
    std::string name = read_string(ar, budget, "a tensor name");
    uint8_t dtype_code = 0;
    ar(dtype_code);
    if (dtype_code >= std::size(kDTypeCodes))
      fail(source, "damaged payload: tensor '" + name + "' has an unknown dtype code " +
                       std::to_string(dtype_code) +
                       " (known: 0 float32, 1 float64, 2 int64, 3 bool)");
    const DType dtype = kDTypeCodes[dtype_code];
    const uint64_t ndim = read_count(ar, budget, 8, "a tensor's dims");
    ShapeReader dims;
    for (uint64_t d = 0; d < ndim; ++d) {
      uint64_t size = 0;
      ar(size);
      dims.add(size, payload.size(), name, source);
    }
    const uint64_t numel = dims.numel;
    budget.charge(numel, dtype_size(dtype), "a tensor's data");
    budget.hold(numel * dtype_size(dtype) + name.size(), "the tensors");
    Tensor t = empty(dims.shape, dtype);
    if (dtype != bool_) {
      dispatch_all(dtype, [&]<typename T>() {  // typed: see write_binary
        if (numel > 0)
          ar(cereal::binary_data(t.data<T>(), static_cast<std::size_t>(numel) * sizeof(T)));
      });
    } else if (numel > 0) {
      // Read as bytes and checked before they become bools: a byte other than 0 or 1 in a C++
      // bool would be undefined behaviour.
      std::string bytes(static_cast<std::size_t>(numel), '\0');
      ar(cereal::binary_data(bytes.data(), bytes.size()));
      bool* to = t.data<bool>();
      for (std::size_t e = 0; e < bytes.size(); ++e) {
        const auto byte = static_cast<unsigned char>(bytes[e]);
        if (byte > 1)
          fail(source, "damaged payload: bool tensor '" + name + "' element " + std::to_string(e) +
                           " is the byte " + std::to_string(byte) + ", not 0 or 1");
        to[e] = byte == 1;
      }
    }
    insert_unique(c.tensors, std::move(name), t, source);
  }
  // A name and an 8-byte number per entry.
  auto read_numbers = [&](auto& map, const char* list) {
    const uint64_t count = read_count(ar, budget, 9, list);
    for (uint64_t i = 0; i < count; ++i) {
      std::string name = read_string(ar, budget, list);
      budget.hold(name.size(), list);
      typename std::remove_reference_t<decltype(map)>::mapped_type v{};
      ar(v);
      insert_unique(map, std::move(name), v, source);
    }
  };
  read_numbers(c.integers, "the integer list");
  read_numbers(c.reals, "the real list");
  const uint64_t string_count = read_count(ar, budget, 2, "the string list");
  for (uint64_t i = 0; i < string_count; ++i) {
    std::string name = read_string(ar, budget, "a string name");
    std::string value = read_string(ar, budget, "a string value");
    budget.hold(name.size() + value.size(), "the strings");
    insert_unique(c.strings, std::move(name), std::move(value), source);
  }
  if (in.peek() != std::char_traits<char>::eof())
    fail(source, "damaged payload: bytes after the end of the data");
  return c;
}

}  // namespace

// ---- Checkpoint accessors -----------------------------------------------------------------------

namespace {
template <class Map>
const typename Map::mapped_type& lookup(
    const Map& map, const std::string& name, const char* what, const std::string& kind) {
  auto it = map.find(name);
  if (it == map.end())
    throw CheckpointError("checkpoint (" + kind + "): no " + what + " named '" + name + "'");
  return it->second;
}
}  // namespace

const Tensor& Checkpoint::tensor(const std::string& name) const {
  return lookup(tensors, name, "tensor", kind);
}
uint64_t Checkpoint::integer(const std::string& name) const {
  return lookup(integers, name, "integer", kind);
}
double Checkpoint::real(const std::string& name) const { return lookup(reals, name, "real", kind); }
const std::string& Checkpoint::string(const std::string& name) const {
  return lookup(strings, name, "string", kind);
}

std::map<std::string, Tensor> Checkpoint::tensors_under(const std::string& prefix) const {
  std::map<std::string, Tensor> out;
  const std::string start = prefix + ".";
  for (auto it = tensors.lower_bound(start); it != tensors.end() && it->first.rfind(start, 0) == 0;
       ++it)
    out.emplace(it->first.substr(start.size()), it->second);
  return out;
}

// ---- files --------------------------------------------------------------------------------------

namespace {
// zlib's CRC-32 of `bytes`, continuing from `crc` (zlib takes 32-bit lengths, so in pieces).
uLong crc32_continue(uLong crc, std::string_view bytes) {
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t left = bytes.size();
  while (left > 0) {
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
    crc = ::crc32(crc, p, chunk);
    p += chunk;
    left -= chunk;
  }
  return crc;
}
}  // namespace

uint32_t crc32(std::string_view bytes) {
  return static_cast<uint32_t>(crc32_continue(::crc32(0L, Z_NULL, 0), bytes));
}

void check_finite(const std::map<std::string, Tensor>& tensors, const std::string& file) {
  for (const auto& [name, tensor] : tensors) {
    if (!is_floating_point(tensor.dtype())) continue;  // int64 and bool values are all finite
    const Tensor dense = contiguous(tensor);           // a file's tensors are already
    const int64_t n = dense.numel();
    int64_t bad = n;  // the first element that is not finite
    double value = 0;
    dispatch(dense.dtype(), [&]<typename T>() {
      const T* x = dense.data<T>();
      for (bad = 0; bad < n && std::isfinite(x[bad]); ++bad) {
      }
      if (bad < n) value = static_cast<double>(x[bad]);
    });
    if (bad < n)
      throw CheckpointError(file + ": tensor " + name + " holds " +
                            (std::isnan(value) ? "nan"
                                : value > 0    ? "inf"
                                               : "-inf") +
                            " (element " + std::to_string(bad) + " of " + std::to_string(n) + ")");
  }
}

namespace {
// What the reader would refuse, the writer refuses first: a file that saves must load.
void check_writable(const Checkpoint& c, CheckpointFormat format) {
  auto check_text = [&](const std::string& text, const char* what) {
    if (format == CheckpointFormat::json && text.find('\0') != std::string::npos)
      throw CheckpointError(std::string("checkpoint: cannot write ") + what +
                            " with a NUL character to JSON (use the binary format)");
  };
  auto check_name = [&](const std::string& name) {
    if (name.empty()) throw CheckpointError("checkpoint: cannot write an entry with an empty name");
    check_text(name, "a name");
  };
  check_text(c.kind, "a kind");
  for (const auto& [name, t] : c.tensors) {
    check_name(name);
    if (!t.defined()) throw CheckpointError("checkpoint: tensor '" + name + "' is undefined");
    if (static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype()) > (uint64_t{1} << 40))
      throw CheckpointError("checkpoint: tensor '" + name + "' is too large to save");
  }
  for (const auto& [name, v] : c.integers) check_name(name);
  for (const auto& [name, v] : c.reals) check_name(name);
  for (const auto& [name, v] : c.strings) {
    check_name(name);
    check_text(v, "a string");
  }
}

// The CRC covers the version, encoding and length fields and the payload, so that a damaged
// header is caught by the checksum too, not only by the checks of its own fields.
uint32_t file_crc(std::string_view header_fields, std::string_view payload) {
  return static_cast<uint32_t>(
      crc32_continue(crc32_continue(::crc32(0L, Z_NULL, 0), header_fields), payload));
}
}  // namespace

std::string serialize_checkpoint(const Checkpoint& checkpoint, CheckpointFormat format) {
  check_writable(checkpoint, format);
  std::string payload;
  try {
    payload = format == CheckpointFormat::binary ? write_binary(checkpoint)
                                                 : checkpoint_payload::write_json(checkpoint);
  } catch (const std::exception& e) {
    throw CheckpointError(std::string("checkpoint: cannot encode: ") + e.what());
  }
  std::string fields;
  put_u32(fields, kFormatVersion);
  put_u32(fields, format == CheckpointFormat::binary ? 0 : 1);
  put_u64(fields, payload.size());
  std::string file(kMagic, sizeof kMagic);
  file += fields;
  put_u32(file, file_crc(fields, payload));
  return file + payload;
}

Checkpoint parse_checkpoint_payload(
    std::string_view payload, CheckpointFormat format, const std::string& source) {
  try {
    return format == CheckpointFormat::binary ? read_binary(payload, source)
                                              : checkpoint_payload::read_json(payload, source);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    // cereal's and rapidjson's own errors (reading past the end, a missing field, a wrong type)
    fail(source, std::string("damaged payload: ") + e.what());
  }
}

namespace {

// What the 28-byte header says of the payload after it.
struct Header {
  CheckpointFormat format;
  uint64_t payload_bytes;
  uint32_t crc;
};

// The header, from the file's first bytes (up to kHeaderSize of them) and the file's size: its
// magic number, version and encoding, and a payload length that is the rest of the file — checked
// before the payload is read, so that a file that is no checkpoint costs 28 bytes, not its size.
Header check_header(std::string_view first_bytes, uint64_t file_size, const std::string& source) {
  if (file_size == 0) fail(source, "the file is empty");
  if (first_bytes.size() < sizeof kMagic ||
      std::memcmp(first_bytes.data(), kMagic, sizeof kMagic) != 0)
    fail(source, "not an ag checkpoint (its first bytes are not ag's magic number)");
  if (file_size < kHeaderSize)
    fail(source,
        "truncated: " + std::to_string(file_size) + " bytes, shorter than the 28-byte header");
  const uint64_t version = get_le(first_bytes, 8, 4);
  if (version != kFormatVersion)
    fail(source, "format version " + std::to_string(version) +
                     " is not supported (this ag reads version " + std::to_string(kFormatVersion) +
                     ")");
  const uint64_t encoding = get_le(first_bytes, 12, 4);
  if (encoding > 1) fail(source, "unknown payload encoding " + std::to_string(encoding));
  const uint64_t length = get_le(first_bytes, 16, 8);
  const uint64_t present = file_size - kHeaderSize;
  if (length != present)
    fail(source,
        (present < length ? "truncated: the header announces " : "damaged: the header announces ") +
            std::to_string(length) + " payload bytes, the file holds " + std::to_string(present));
  return {encoding == 0 ? CheckpointFormat::binary : CheckpointFormat::json, length,
      static_cast<uint32_t>(get_le(first_bytes, 24, 4))};
}

// The payload whose header is `first_bytes`, its CRC checked, parsed.
Checkpoint parse_payload(std::string_view first_bytes, const Header& header,
    std::string_view payload, const std::string& source) {
  if (file_crc(first_bytes.substr(8, 16), payload) != header.crc)
    fail(source, "damaged: the CRC-32 of the file does not match the one in its header");
  return parse_checkpoint_payload(payload, header.format, source);
}

}  // namespace

Checkpoint parse_checkpoint(std::string_view bytes, const std::string& source) {
  const std::string_view first_bytes = bytes.substr(0, std::min(bytes.size(), kHeaderSize));
  const Header header = check_header(first_bytes, bytes.size(), source);
  return parse_payload(first_bytes, header, bytes.substr(kHeaderSize), source);
}

Checkpoint load_checkpoint(const std::string& path) {
  try {
    const InputFile file(path, "checkpoint");
    const std::string first_bytes = file.read(0, std::min<uint64_t>(file.size(), kHeaderSize));
    const Header header = check_header(first_bytes, file.size(), path);
    return parse_payload(first_bytes, header, file.read(kHeaderSize, header.payload_bytes), path);
  } catch (const CheckpointError&) {
    throw;
  } catch (const IoError& e) {
    throw CheckpointError(e.what());  // "checkpoint PATH: ...", as the error type of checkpoints
  }
}

SaveResult save_checkpoint(
    const Checkpoint& checkpoint, const std::string& path, const SaveOptions& options) {
  const std::string bytes = serialize_checkpoint(checkpoint, options.format);
  try {
    return write_file_atomically(path, bytes, "checkpoint", options.on_phase);
  } catch (const CheckpointError&) {
    throw;
  } catch (const IoError& e) {
    throw CheckpointError(e.what());  // the same words, as the error type of checkpoints
  }
}

}  // namespace ag
