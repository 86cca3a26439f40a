#include "io/npy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include "autograd/ops.h"
#include "io/file.h"

namespace ag {

static_assert(std::endian::native == std::endian::little,
    ".npy files here are little-endian ('<f4'); this reader copies them as they are");

namespace {

constexpr std::string_view kNpyMagic = "\x93NUMPY";
constexpr std::size_t kMaxNpyHeaderBytes = 1 << 20;  // NumPy itself refuses headers over 10 kB

[[noreturn]] void refuse_npy(const std::string& source, const std::string& problem) {
  refuse_file<NpyError>(source, ".npy", problem);
}

// The header's dict, {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, read strictly:
// those three keys once each, in any order, and nothing else.
class DictReader : public HeaderText<NpyError> {  // a Python literal: blanks are spaces
 public:
  DictReader(std::string_view text, const std::string& source)
      : HeaderText(text, source, ".npy", " ") {}

  std::string quoted() {
    skip_blanks();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      fail("expected a quoted string");
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("a string without its closing quote");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  // (), (3,), (2, 3) and (2, 3,)
  Shape shape() {
    Shape dims;
    expect("(");
    if (accept(")")) return dims;
    do {
      if (accept(")")) return dims;  // after a trailing comma
      if (dims.size() >= 64) fail("a shape of more than 64 dimensions");
      dims.push_back(integer());
    } while (accept(","));
    expect(")");
    if (dims.size() == 1 && text_[pos_ - 2] != ',') fail("a one-element shape needs a comma: (n,)");
    return dims;
  }
  bool boolean() {
    if (accept("True")) return true;
    if (accept("False")) return false;
    fail("expected True or False");
  }
};

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

NpyHeader read_header(std::string_view text, const std::string& source) {
  DictReader reader(text, source);
  NpyHeader header;
  bool has_descr = false, has_order = false, has_shape = false;
  reader.expect("{");
  while (!reader.accept("}")) {
    const std::string key = reader.quoted();
    reader.expect(":");
    bool* seen = key == "descr"           ? &has_descr
                 : key == "fortran_order" ? &has_order
                 : key == "shape"         ? &has_shape
                                          : nullptr;
    if (seen == nullptr) reader.fail("an unknown key '" + key + "'");
    if (*seen) reader.fail("the key '" + key + "' twice");
    *seen = true;
    if (key == "descr")
      header.descr = reader.quoted();
    else if (key == "fortran_order")
      header.fortran_order = reader.boolean();
    else
      header.shape = reader.shape();
    if (!reader.accept(",")) {
      reader.expect("}");
      break;
    }
  }
  if (!has_descr || !has_order || !has_shape)
    reader.fail(std::string("the header lacks '") +
                (!has_descr      ? "descr"
                    : !has_order ? "fortran_order"
                                 : "shape") +
                "'");
  reader.skip_blanks();
  if (reader.position() + 1 != text.size() || text.back() != '\n')
    reader.fail("the header must end in spaces and one newline after the dict");
  return header;
}

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& source) {
  if (bytes.substr(0, kNpyMagic.size()) != kNpyMagic)
    refuse_npy(source, "it does not start with \\x93NUMPY");
  if (bytes.size() < 10) refuse_npy(source, "it ends inside the preamble");
  const int major = static_cast<unsigned char>(bytes[6]),
            minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    refuse_npy(source, "version " + std::to_string(major) + "." + std::to_string(minor) +
                           " (known: 1.0, 2.0, 3.0)");
  std::size_t header_bytes, header_start;
  if (major == 1) {
    header_bytes = static_cast<unsigned char>(bytes[8]) |
                   (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else {
    if (bytes.size() < 12) refuse_npy(source, "it ends inside the preamble");
    uint32_t length;
    std::memcpy(&length, bytes.data() + 8, 4);
    header_bytes = length;
    header_start = 12;
  }
  if (header_bytes > kMaxNpyHeaderBytes)
    refuse_npy(source, "a header of " + std::to_string(header_bytes) + " bytes (over 1 MiB)");
  if (header_bytes > bytes.size() - header_start)
    refuse_npy(source, "the header length " + std::to_string(header_bytes) +
                           " runs past the file (" + std::to_string(bytes.size()) + " bytes)");
  const NpyHeader header = read_header(bytes.substr(header_start, header_bytes), source);
  const std::string_view data = bytes.substr(header_start + header_bytes);

  // The descrs ag reads, each as its dtype; '|b1' is NumPy's bool (one byte, 0 or 1; '|' means
  // byte order does not apply), '<i8' its int64.
  std::optional<DType> dtype;
  if (header.descr == "<f4") dtype = float32;
  if (header.descr == "<f8") dtype = float64;
  if (header.descr == "<i8") dtype = int64;
  if (header.descr == "|b1") dtype = bool_;
  if (!dtype)
    refuse_npy(
        source, "dtype '" + header.descr + "' is not one ag reads ('<f4', '<f8', '<i8', '|b1')");
  const std::size_t element_bytes = dtype_size(*dtype);
  // The product of the dimensions, zeros left out, must fit int64 (else ag could not compute
  // the strides, even of an empty array).
  uint64_t count = 1, span = element_bytes;
  for (const int64_t d : header.shape) {
    const uint64_t size = static_cast<uint64_t>(d);
    if (__builtin_mul_overflow(span, std::max<uint64_t>(size, 1), &span) || span > INT64_MAX)
      refuse_npy(source, "shape " + shape_str(header.shape) + " is too large (over 2^63 bytes)");
    count *= size;
  }
  uint64_t expected;
  if (__builtin_mul_overflow(count, element_bytes, &expected) || expected != data.size())
    refuse_npy(source, "shape " + shape_str(header.shape) + " of '" + header.descr + "' needs " +
                           std::to_string(count) + " × " + std::to_string(element_bytes) +
                           " bytes, the file holds " + std::to_string(data.size()) +
                           " after its header");

  // Fortran order is C order of the reversed shape: read it so, then reverse the dimensions back.
  Shape stored = header.shape;
  if (header.fortran_order) std::reverse(stored.begin(), stored.end());
  Tensor out = empty(stored, *dtype);
  if (*dtype == bool_) {
    // Bytes other than 0 and 1 are damage: in a C++ bool they would be undefined behaviour.
    bool* to = out.data<bool>();
    for (uint64_t i = 0; i < count; ++i) {
      const auto byte = static_cast<unsigned char>(data[i]);
      if (byte > 1)
        refuse_npy(source, "'|b1' element " + std::to_string(i) + " is the byte " +
                               std::to_string(byte) + ", not 0 or 1 (file byte " +
                               std::to_string(header_start + header_bytes + i) + ")");
      to[i] = byte == 1;
    }
  } else if (count > 0) {  // '<f4', '<f8', '<i8': ag's own little-endian bytes
    std::memcpy(out.raw_data(), data.data(), data.size());
  }
  if (!header.fortran_order || header.shape.size() < 2) return out;
  std::vector<int64_t> reversed(header.shape.size());
  for (std::size_t d = 0; d < reversed.size(); ++d)
    reversed[d] = static_cast<int64_t>(reversed.size() - 1 - d);
  return out.permute(reversed).contiguous();  // the array's shape, in C order
}

Tensor read_npy(const std::string& path) {
  const InputFile file(path, "npy");
  // The magic number first: a file that is no .npy costs 6 bytes, not its size.
  const std::string first_bytes = file.read(0, std::min<uint64_t>(file.size(), kNpyMagic.size()));
  if (first_bytes != kNpyMagic) parse_npy(first_bytes, path);  // refuses it, as for the whole file
  return parse_npy(file.read(0, file.size()), path);
}

std::string serialize_npy(const Tensor& tensor) {
  if (!tensor.defined()) fail<ValueError>("write_npy: the tensor is undefined");
  const Tensor t = tensor.detach().contiguous();
  std::string shape = "(";
  for (const int64_t d : t.shape()) shape += std::to_string(d) + ", ";
  if (t.dim() == 1)
    shape.pop_back();  // "(3,)"
  else if (t.dim() > 1)
    shape.resize(shape.size() - 2);
  shape += ")";
  const char* descr = t.dtype() == float32   ? "<f4"
                      : t.dtype() == float64 ? "<f8"
                      : t.dtype() == int64   ? "<i8"
                                             : "|b1";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that preamble + header + '\n' is a multiple of 64 bytes (NumPy's rule).
  const bool version2 = header.size() + 11 > 65535;
  const std::size_t preamble = version2 ? 12 : 10;
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string file(kNpyMagic);
  file += static_cast<char>(version2 ? 2 : 1);
  file += '\0';
  const uint32_t length = static_cast<uint32_t>(header.size());
  file.append(reinterpret_cast<const char*>(&length), version2 ? 4 : 2);
  file += header;
  // The elements as ag holds them: little-endian numbers, a bool one byte 0 or 1.
  file.append(static_cast<const char*>(t.raw_data()),
      static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
  return file;
}

WriteResult write_npy(const std::string& path, const Tensor& tensor) {
  return write_file_atomically(path, serialize_npy(tensor), "npy");
}

}  // namespace ag
