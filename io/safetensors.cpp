#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "data/utf8.h"
#include "io/file.h"

namespace ag {

static_assert(std::endian::native == std::endian::little,
    "safetensors stores little-endian numbers; this reader copies them as they are");

namespace {

constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;  // the format's own limit

[[noreturn]] void refuse_safetensors(const std::string& source, const std::string& problem) {
  refuse_file<SafetensorsError>(source, "safetensors", problem);
}

// ---- the header's JSON --------------------------------------------------------------------------
// A strict reader for what a safetensors header may hold: objects, strings and non-negative
// integers. Anything else (floats, true, null, a trailing comma) is refused: no valid header has
// it. No recursion beyond the format's two levels, so no input can exhaust the stack.
class HeaderReader : public HeaderText<SafetensorsError> {  // JSON: blanks are " \t\n\r"
 public:
  HeaderReader(std::string_view text, const std::string& source)
      : HeaderText(text, source, "safetensors", " \t\n\r") {}

  std::string string() {
    expect("\"", "to start a string");
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("a string runs past the end of the header");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("a string runs past the end of the header");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          data::append_utf8(code_point(), out);  // valid: no lone surrogate, ≤ U+10FFFF
          break;
        default:
          fail(std::string("an unknown escape \\") + e + " in a string");
      }
    }
  }
  std::vector<int64_t> integers() {
    std::vector<int64_t> values;
    expect("[", "to start a list of integers");
    if (accept("]")) return values;
    do {
      if (values.size() >= 64) fail("a list of more than 64 integers");
      values.push_back(integer());
    } while (accept(","));
    expect("]", "to end a list of integers");
    return values;
  }

 private:
  uint32_t hex4() {
    if (text_.size() - pos_ < 4) fail("a \\u escape runs past the end of the header");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      value <<= 4;
      if (h >= '0' && h <= '9')
        value |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        value |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        value |= static_cast<uint32_t>(h - 'A' + 10);
      else
        fail("a \\u escape with a character that is not hexadecimal");
    }
    return value;
  }
  // After "\u": one code point, joining a UTF-16 surrogate pair.
  uint32_t code_point() {
    const uint32_t first = hex4();
    if (first >= 0xDC00 && first <= 0xDFFF) fail("a lone low surrogate in a \\u escape");
    if (first < 0xD800 || first > 0xDBFF) return first;
    if (text_.substr(pos_, 2) != "\\u") fail("a high surrogate without its low half");
    pos_ += 2;
    const uint32_t second = hex4();
    if (second < 0xDC00 || second > 0xDFFF) fail("a high surrogate without its low half");
    return 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
  }
};

// ---- dtypes ---------------------------------------------------------------------------------------

enum class FileDType { F32, F64, I64, BOOL, F16, BF16 };

struct DTypeInfo {
  const char* name;
  FileDType file;
  std::size_t bytes;  // per element in the file
  DType loaded;       // what ag holds it in
};

constexpr DTypeInfo kDTypes[] = {
    {"F32", FileDType::F32, 4, float32},
    {"F64", FileDType::F64, 8, float64},
    {"I64", FileDType::I64, 8, int64},
    {"BOOL", FileDType::BOOL, 1, bool_},
    {"F16", FileDType::F16, 2, float32},
    {"BF16", FileDType::BF16, 2, float32},
};

// The format's other dtypes: known, but not ones ag reads.
constexpr const char* kUnsupportedDTypes[] = {"U8", "I8", "I16", "U16", "I32", "U32", "U64",
    "F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

const DTypeInfo& dtype_info(const std::string& name, HeaderReader& reader) {
  for (const DTypeInfo& info : kDTypes)
    if (name == info.name) return info;
  for (const char* known : kUnsupportedDTypes)
    if (name == known)
      reader.fail("dtype " + name + " is not one ag reads (F32, F64, I64, BOOL, F16, BF16)");
  reader.fail("unknown dtype \"" + name + "\"");
}

// The file's name of the dtype ag writes a tensor of `dtype` as: its own.
const char* file_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "F32";
    case DType::float64:
      return "F64";
    case DType::int64:
      return "I64";
    default:
      return "BOOL";
  }
}

// IEEE half precision (1 sign, 5 exponent, 10 fraction bits) to float.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F, fraction = h & 0x3FF;
  if (exponent == 0) {  // zero or subnormal: fraction · 2^−24
    const float magnitude = std::ldexp(static_cast<float>(fraction), -24);
    return sign ? -magnitude : magnitude;
  }
  const uint32_t bits = exponent == 0x1F ? sign | 0x7F800000 | (fraction << 13)  // inf, NaN
                                         : sign | ((exponent + 112) << 23) | (fraction << 13);
  return std::bit_cast<float>(bits);
}

// bfloat16 is the top half of a float32.
float bfloat16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// One tensor as the header describes it.
struct Entry {
  std::string name;
  const DTypeInfo* dtype = nullptr;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

Entry read_entry(std::string name, HeaderReader& reader) {
  Entry entry;
  entry.name = std::move(name);
  bool has_dtype = false, has_shape = false, has_offsets = false;
  reader.expect("{", "to start the entry of tensor \"" + entry.name + "\"");
  if (!reader.accept("}")) {
    do {
      const std::string key = reader.string();
      reader.expect(":", "after a key");
      bool* seen = key == "dtype"          ? &has_dtype
                   : key == "shape"        ? &has_shape
                   : key == "data_offsets" ? &has_offsets
                                           : nullptr;
      if (seen == nullptr)
        reader.fail("tensor \"" + entry.name + "\" has an unknown field \"" + key + "\"");
      if (*seen) reader.fail("tensor \"" + entry.name + "\" has two \"" + key + "\" fields");
      *seen = true;
      if (key == "dtype") {
        entry.dtype = &dtype_info(reader.string(), reader);
      } else if (key == "shape") {
        entry.shape = reader.integers();
      } else {
        const std::vector<int64_t> offsets = reader.integers();
        if (offsets.size() != 2)
          reader.fail("tensor \"" + entry.name + "\": data_offsets must be [begin, end]");
        entry.begin = static_cast<uint64_t>(offsets[0]);
        entry.end = static_cast<uint64_t>(offsets[1]);
      }
    } while (reader.accept(","));
    reader.expect("}", "to end the entry of tensor \"" + entry.name + "\"");
  }
  if (!has_dtype || !has_shape || !has_offsets)
    reader.fail("tensor \"" + entry.name + "\" lacks " +
                (!has_dtype      ? "dtype"
                    : !has_shape ? "shape"
                                 : "data_offsets"));
  return entry;
}

std::map<std::string, std::string> read_metadata(HeaderReader& reader) {
  std::map<std::string, std::string> metadata;
  reader.expect("{", "to start __metadata__");
  if (reader.accept("}")) return metadata;
  do {
    std::string key = reader.string();
    reader.expect(":", "after a key");
    if (metadata.count(key)) reader.fail("__metadata__ has two \"" + key + "\" keys");
    metadata[std::move(key)] = reader.string();
  } while (reader.accept(","));
  reader.expect("}", "to end __metadata__");
  return metadata;
}

// numel × element bytes, or nothing if the product of the dimensions (zeros left out) is over
// 2^63 bytes: ag could not compute such a shape's strides, even of an empty tensor.
std::optional<uint64_t> byte_size(const Shape& shape, std::size_t element_bytes) {
  uint64_t bytes = element_bytes, span = element_bytes;  // span: the product without the zeros
  for (const int64_t d : shape) {
    const uint64_t size = static_cast<uint64_t>(d);
    if (__builtin_mul_overflow(span, std::max<uint64_t>(size, 1), &span) || span > INT64_MAX)
      return std::nullopt;
    bytes *= size;  // at most span: cannot overflow
  }
  return bytes;
}

// The tensor of one checked entry, converted into the dtype ag holds it in.
Tensor load_entry(const Entry& entry, const char* data, const std::string& source) {
  Tensor out = empty(entry.shape, entry.dtype->loaded);
  const char* bytes = data + entry.begin;
  const std::size_t n = static_cast<std::size_t>(out.numel());
  switch (entry.dtype->file) {
    case FileDType::F32:
    case FileDType::F64:
    case FileDType::I64:  // the same bytes in the file and in ag: little-endian, 4 or 8 each
      if (n > 0) std::memcpy(out.raw_data(), bytes, n * entry.dtype->bytes);
      break;
    case FileDType::BOOL: {
      // One byte each, 0 or 1 (torch writes nothing else). Any other byte is damage: stored in a
      // C++ bool it would be undefined behaviour, so it is refused before it is copied.
      bool* to = out.data<bool>();
      for (std::size_t i = 0; i < n; ++i) {
        const auto byte = static_cast<unsigned char>(bytes[i]);
        if (byte > 1)
          refuse_safetensors(source, "tensor \"" + entry.name + "\" (BOOL) element " +
                                         std::to_string(i) + " is the byte " +
                                         std::to_string(byte) + ", not 0 or 1 (data byte " +
                                         std::to_string(entry.begin + i) + ")");
        to[i] = byte == 1;
      }
      break;
    }
    case FileDType::F16:
    case FileDType::BF16: {
      float* to = out.data<float>();
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, bytes + 2 * i, 2);
        to[i] = entry.dtype->file == FileDType::F16 ? half_to_float(v) : bfloat16_to_float(v);
      }
      break;
    }
  }
  return out;
}

// JSON string literal of `text` (quotes, backslashes and control characters escaped).
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(c));
      out += escape;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

const Tensor& Safetensors::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  std::string names;
  for (const auto& [n, t] : tensors) names += (names.empty() ? "" : ", ") + n;
  throw SafetensorsError("safetensors: no tensor \"" + name + "\" (the file has: " + names + ")");
}

std::map<std::string, Tensor> Safetensors::as_map() const {
  return {tensors.begin(), tensors.end()};
}

namespace {

// The header's length, from the file's first 8 bytes (fewer if it is shorter) and its size: within
// 100 MB and within the file.
uint64_t header_length(
    std::string_view first_bytes, uint64_t file_size, const std::string& source) {
  if (file_size < 8)
    refuse_safetensors(
        source, std::to_string(file_size) + " bytes, too short for the 8-byte header length");
  uint64_t header_bytes;
  std::memcpy(&header_bytes, first_bytes.data(), 8);
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    refuse_safetensors(
        source, "the header length " + std::to_string(header_bytes) + " is over 100 MB");
  if (header_bytes > file_size - 8)
    refuse_safetensors(source, "the header length " + std::to_string(header_bytes) +
                                   " runs past the file (" + std::to_string(file_size) + " bytes)");
  return header_bytes;
}

// The header parsed and every entry checked against the data part's size (`data_bytes`, the
// file after the header), before any of the data is read: the metadata, and the entries.
struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
};
SafetensorsHeader parse_header(
    std::string_view header, uint64_t data_bytes, const std::string& source) {
  // 1. The header, every entry checked; nothing allocated but the header's own strings.
  SafetensorsHeader file;
  std::vector<Entry>& entries = file.entries;
  HeaderReader reader(header, source);
  std::unordered_set<std::string> names;
  bool has_metadata = false;
  reader.expect("{", "to start the header");
  if (!reader.accept("}")) {
    do {
      std::string name = reader.string();
      reader.expect(":", "after a key");
      if (name == "__metadata__") {
        if (has_metadata) reader.fail("two __metadata__ entries");
        has_metadata = true;
        file.metadata = read_metadata(reader);
        continue;
      }
      // A set, not a scan of the entries so far: 400 000 names must not cost 8·10^10 compares.
      if (!names.insert(name).second) reader.fail("two tensors named \"" + name + "\"");
      entries.push_back(read_entry(std::move(name), reader));
    } while (reader.accept(","));
    reader.expect("}", "to end the header");
  }
  if (!reader.at_end()) reader.fail("something after the header's closing '}'");

  // 2. Each range matches its shape and lies in the data part.
  for (const Entry& e : entries) {
    const std::string what = "tensor \"" + e.name + "\" (" + e.dtype->name + ", shape " +
                             shape_str(e.shape) + ", data_offsets [" + std::to_string(e.begin) +
                             ", " + std::to_string(e.end) + "])";
    if (e.begin > e.end) refuse_safetensors(source, what + ": begin is after end");
    if (e.end > data_bytes)
      refuse_safetensors(
          source, what + ": runs past the file's " + std::to_string(data_bytes) + " data bytes");
    const std::optional<uint64_t> expected = byte_size(e.shape, e.dtype->bytes);
    if (!expected) refuse_safetensors(source, what + ": the shape is too large (over 2^63 bytes)");
    if (*expected != e.end - e.begin)
      refuse_safetensors(source, what + ": the shape needs " + std::to_string(*expected) +
                                     " bytes, the range holds " + std::to_string(e.end - e.begin));
  }
  // 3. The ranges tile the data part: sorted by start, each begins where the previous ended.
  std::vector<const Entry*> by_start;
  for (const Entry& e : entries) by_start.push_back(&e);
  std::sort(by_start.begin(), by_start.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  for (const Entry* e : by_start) {
    if (e->begin < covered)
      refuse_safetensors(source, "tensor \"" + e->name + "\" overlaps the bytes of another tensor");
    if (e->begin > covered)
      refuse_safetensors(source, "data bytes [" + std::to_string(covered) + ", " +
                                     std::to_string(e->begin) +
                                     ") belong to no tensor (a gap before \"" + e->name + "\")");
    covered = e->end;
  }
  if (covered != data_bytes)
    refuse_safetensors(source, "data bytes [" + std::to_string(covered) + ", " +
                                   std::to_string(data_bytes) +
                                   ") after the last tensor belong to no tensor");

  return file;
}

// 4. Only now the tensors, each within the bytes the file holds.
Safetensors load_tensors(
    SafetensorsHeader header, std::string_view data, const std::string& source) {
  Safetensors file;
  file.metadata = std::move(header.metadata);
  for (const Entry& e : header.entries)
    file.tensors.emplace_back(e.name, load_entry(e, data.data(), source));
  return file;
}

}  // namespace

Safetensors parse_safetensors(std::string_view bytes, const std::string& source) {
  const uint64_t header_bytes = header_length(bytes.substr(0, 8), bytes.size(), source);
  const uint64_t data_bytes = bytes.size() - 8 - header_bytes;
  SafetensorsHeader header = parse_header(bytes.substr(8, header_bytes), data_bytes, source);
  return load_tensors(std::move(header), bytes.substr(8 + header_bytes), source);
}

// The header read and checked first, then the data part: a file that is no safetensors file costs
// its first 8 bytes, or its header, not its size.
Safetensors read_safetensors(const std::string& path) {
  const InputFile file(path, "safetensors");
  const uint64_t header_bytes =
      header_length(file.read(0, std::min<uint64_t>(file.size(), 8)), file.size(), path);
  const uint64_t data_bytes = file.size() - 8 - header_bytes;
  SafetensorsHeader header = parse_header(file.read(8, header_bytes), data_bytes, path);
  return load_tensors(std::move(header), file.read(8 + header_bytes, data_bytes), path);
}

std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
    const SafetensorsWriteOptions& options) {
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second)
      fail<ValueError>(
          "write_safetensors: the name \"", name, "\" is used twice or is reserved (__metadata__)");
    if (!tensor.defined())
      fail<ValueError>("write_safetensors: tensor \"", name, "\" is undefined");
  }
  std::string header = "{";
  if (!options.metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [key, value] : options.metadata) {
      if (header.back() != '{') header += ',';
      header += json_string(key);
      header += ':';
      header += json_string(value);
    }
    header += '}';
  }
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const Tensor t = tensor.detach().contiguous();
    const std::size_t begin = data.size();
    // ag's element bytes are the file's: F32, F64 and I64 little-endian, BOOL one byte 0 or 1.
    data.append(static_cast<const char*>(t.raw_data()),
        static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
    std::string shape;
    for (const int64_t d : t.shape()) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d);
    }
    const char* dtype = file_dtype_name(t.dtype());
    if (header.size() > 1) header += ',';
    header += json_string(name);
    header += ":{\"dtype\":\"" + std::string(dtype) + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) +
              "]}";
  }
  header += "}";
  // Pad the header with spaces so that the data starts 8-byte aligned, as the reference writer.
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t header_bytes = header.size();
  std::string file(reinterpret_cast<const char*>(&header_bytes), 8);
  return file + header + data;
}

WriteResult write_safetensors(const std::string& path,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const SafetensorsWriteOptions& options) {
  return write_file_atomically(path, serialize_safetensors(tensors, options), "safetensors");
}

// ---- modules ----------------------------------------------------------------------------------

WriteResult save_safetensors(
    const nn::Module& module, const std::string& path, const ModuleFileOptions& options) {
  std::vector<std::pair<std::string, Tensor>> tensors = module.named_parameters();
  for (auto& buffer : module.named_buffers(/*persistent_only=*/true))
    tensors.push_back(std::move(buffer));
  if (options.rename)
    for (auto& [name, tensor] : tensors) name = options.rename(name);
  SafetensorsWriteOptions write_options;
  write_options.metadata = options.metadata;
  return write_safetensors(path, tensors, write_options);
}

std::vector<std::string> load_safetensors(nn::Module& module, const std::string& path,
    const ModuleFileOptions& options, std::map<std::string, std::string>* metadata) {
  const Safetensors file = read_safetensors(path);
  std::vector<std::string> problems = load_safetensors(module, file, path, options);
  if (metadata) *metadata = file.metadata;
  return problems;
}

std::vector<std::string> load_safetensors(nn::Module& module, const Safetensors& file,
    const std::string& path, const ModuleFileOptions& options) {
  std::map<std::string, Tensor> state;
  for (const auto& [name, tensor] : file.tensors) {
    const std::string own = options.rename ? options.rename(name) : name;
    if (!state.emplace(own, tensor).second)
      throw SafetensorsError(path + ": two tensors become \"" + own + "\" once renamed");
  }
  // A tied tensor is saved once, under its first name (named_parameters; as safetensors'
  // save_model): its other names take the same entry, so the module loads tied.
  std::map<const void*, std::string> saved_name;  // tensor -> the name of it the file holds
  for (const auto& [name, tensor] : module.state_dict())
    if (state.count(name)) saved_name.emplace(tensor.identity(), name);
  for (const auto& [name, tensor] : module.state_dict()) {
    auto alias = saved_name.find(tensor.identity());
    if (!state.count(name) && alias != saved_name.end())
      state.emplace(name, state.at(alias->second));
  }
  // Non-persistent buffers are not in the file: they keep the values the module computed.
  std::set<std::string> persistent;
  for (const auto& [name, buffer] : module.named_buffers(/*persistent_only=*/true))
    persistent.insert(name);
  for (const auto& [name, buffer] : module.named_buffers()) {
    if (!persistent.count(name)) {
      if (state.count(name))
        throw nn::StateDictError(path + ": holds \"" + name +
                                 "\", a buffer the module computes itself (not persistent)");
      state.emplace(name, buffer.detach().clone());
    }
  }
  try {
    return module.load_state_dict(state, options.strict);
  } catch (const nn::StateDictError& e) {
    throw nn::StateDictError(path + ": " + e.what());
  }
}

namespace {
// Rewrites the segment after each "blks" segment of a dotted name with `rename`.
std::string rename_block_segments(
    const std::string& name, const std::function<std::string(const std::string&)>& rename) {
  std::string out, previous;
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    std::string segment = name.substr(start, dot - start);
    // Only a segment with more after it: a block index, not a parameter's own name.
    if (previous == "blks" && dot < name.size()) segment = rename(segment);
    if (start > 0) out += '.';
    out += segment;
    previous = name.substr(start, dot - start);
    start = dot + 1;
  }
  return out;
}

bool all_digits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}
}  // namespace

std::string d2l_name(const std::string& ag_name) {
  return rename_block_segments(ag_name, [](const std::string& segment) {
    return all_digits(segment) ? std::string("block").append(segment) : segment;
  });
}

std::string from_d2l_name(const std::string& name) {
  return rename_block_segments(name, [](const std::string& segment) {
    return segment.starts_with("block") && all_digits(segment.substr(5)) ? segment.substr(5)
                                                                         : segment;
  });
}

}  // namespace ag
