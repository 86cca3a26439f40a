#include "io/checkpoint.h"

#include <zlib.h>

// rapidjson (under cereal's JSON archive) must not convert numbers itself: Debian's rapidjson
// 1.1.0 misreads some (a zero with an exponent, numbers just past DBL_MAX) and reads its table of
// powers of ten out of bounds for others. With this flag it hands over every number as its text,
// which read_json converts with std::from_chars (correctly rounded, range-checked).
#define RAPIDJSON_PARSE_DEFAULT_FLAGS kParseNumbersAsStringsFlag | kParseNanAndInfFlag

#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/string.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "autograd/autograd.h"

namespace ag {

namespace {

constexpr char kMagic[8] = {'\x89', 'A', 'G', 'C', '\r', '\n', '\x1a', '\n'};
constexpr uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderSize = 28;
// Our own documents nest 4 deep (root, array, entry, array); anything deeper is not ours, and
// rapidjson's recursive parser must not be handed arbitrarily deep input.
constexpr int kMaxJsonDepth = 16;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw CheckpointError("checkpoint " + source + ": " + what);
}

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

const char* dtype_tag(DType dtype) { return dtype == float32 ? "float32" : "float64"; }

// ---- the binary payload (cereal's portable binary archive) --------------------------------------

// Every length read from the file is charged against the bytes of the payload: nothing claims
// more than the file holds, so nothing allocates more than the file's size.
class Budget {
 public:
  Budget(uint64_t bytes, const std::string& source) : remaining_(bytes), source_(source) {}
  void charge(uint64_t count, uint64_t bytes_each, const char* what) {
    if (bytes_each != 0 && count > remaining_ / bytes_each)
      fail(source_, std::string("damaged payload: ") + what + " claims " + std::to_string(count) +
                        " items, more than the file holds");
    remaining_ -= count * bytes_each;
  }

 private:
  uint64_t remaining_;
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
      ar(static_cast<uint8_t>(t.dtype() == float32 ? 0 : 1));
      ar(cereal::make_size_tag(static_cast<cereal::size_type>(t.dim())));
      for (int64_t size : t.shape()) ar(static_cast<uint64_t>(size));
      Tensor data = t.detach().contiguous();
      dispatch(t.dtype(), [&]<typename T>() {
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

template <class Map, class Value>
void insert_unique(Map& map, std::string name, Value value, const std::string& source) {
  if (name.empty()) fail(source, "damaged payload: an entry has an empty name");
  if (!map.emplace(name, std::move(value)).second)
    fail(source, "damaged payload: entry '" + name + "' appears twice");
}

Checkpoint read_binary(std::string_view payload, const std::string& source) {
  // cereal's portable archive starts with its writer's byte order: 1 little-endian, 0 big-endian.
  if (payload.empty() || (payload[0] != 0 && payload[0] != 1))
    fail(source, "damaged payload: no valid byte-order mark");
  Budget budget(payload.size(), source);
  std::istringstream in(std::string(payload), std::ios::binary);
  Checkpoint c;
  cereal::PortableBinaryInputArchive ar(in);
  c.kind = read_string(ar, budget, "the kind");
  const uint64_t tensor_count = read_count(ar, budget, 2, "the tensor list");
  for (uint64_t i = 0; i < tensor_count; ++i) {
    std::string name = read_string(ar, budget, "a tensor name");
    uint8_t dtype_code = 0;
    ar(dtype_code);
    if (dtype_code > 1)
      fail(source, "damaged payload: tensor '" + name + "' has an unknown dtype code");
    const DType dtype = dtype_code == 0 ? float32 : float64;
    const uint64_t ndim = read_count(ar, budget, 8, "a tensor's dims");
    ShapeReader dims;
    for (uint64_t d = 0; d < ndim; ++d) {
      uint64_t size = 0;
      ar(size);
      dims.add(size, payload.size(), name, source);
    }
    const uint64_t numel = dims.numel;
    budget.charge(numel, dtype_size(dtype), "a tensor's data");
    Tensor t = empty(dims.shape, dtype);
    dispatch(dtype, [&]<typename T>() {
      if (numel > 0)
        ar(cereal::binary_data(t.data<T>(), static_cast<std::size_t>(numel) * sizeof(T)));
    });
    insert_unique(c.tensors, std::move(name), t, source);
  }
  // A name and an 8-byte number per entry.
  auto read_numbers = [&](auto& map, const char* list) {
    const uint64_t count = read_count(ar, budget, 9, list);
    for (uint64_t i = 0; i < count; ++i) {
      std::string name = read_string(ar, budget, list);
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
    insert_unique(c.strings, std::move(name), std::move(value), source);
  }
  if (in.peek() != std::char_traits<char>::eof())
    fail(source, "damaged payload: bytes after the end of the data");
  return c;
}

// ---- the JSON payload (cereal's JSON archive) ---------------------------------------------------

std::string write_json(const Checkpoint& c) {
  std::ostringstream out;
  {
    cereal::JSONOutputArchive ar(out);
    ar(cereal::make_nvp("kind", c.kind));
    ar.setNextName("tensors");
    ar.startNode();
    ar.makeArray();
    for (const auto& [name, t] : c.tensors) {
      ar.startNode();
      ar(cereal::make_nvp("name", name));
      ar(cereal::make_nvp("dtype", std::string(dtype_tag(t.dtype()))));
      ar.setNextName("shape");
      ar.startNode();
      ar.makeArray();
      for (int64_t size : t.shape()) ar(static_cast<uint64_t>(size));
      ar.finishNode();
      ar.setNextName("data");
      ar.startNode();
      ar.makeArray();
      for (double v : t.detach().to_vector<double>())
        ar(v);  // a float32 value is exact as a double
      ar.finishNode();
      ar.finishNode();
    }
    ar.finishNode();
    auto write_list = [&](const char* list, const auto& map) {
      ar.setNextName(list);
      ar.startNode();
      ar.makeArray();
      for (const auto& [name, v] : map) {
        ar.startNode();
        ar(cereal::make_nvp("name", name));
        ar(cereal::make_nvp("value", v));
        ar.finishNode();
      }
      ar.finishNode();
    };
    write_list("integers", c.integers);
    write_list("reals", c.reals);
    write_list("strings", c.strings);
  }
  return out.str();
}

// The nesting depth of a JSON text (brackets outside strings), so that over-deep input is refused
// before rapidjson's recursive parser sees it.
int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

// cereal reads JSON strings up to their first NUL, so a "\u0000" escape would silently cut a
// name short (and let "float32\u0000x" pass as "float32"); ag never writes one.
bool has_nul_escape(std::string_view text) {
  for (std::size_t at = text.find("\\u"); at != std::string_view::npos;
       at = text.find("\\u", at + 1)) {
    // Count the backslashes before this one: an even number means it really starts an escape.
    std::size_t slashes = 0;
    while (at > slashes && text[at - 1 - slashes] == '\\') ++slashes;
    if (slashes % 2 == 0 && text.substr(at + 2, 4) == "0000") return true;
  }
  return false;
}

// Checks, event by event, that a JSON document has the layout write_json produces:
//   {"kind": string, "tensors": [{"name": string, "dtype": string, "shape": [number…], "data":
//   [number…]}…],
//    "integers": [{"name": string, "value": number}…], "reals": (the same), "strings": [{"name":
//    string, "value": string}…]}
class JsonSchemaCheck : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, JsonSchemaCheck> {
 public:
  std::string problem;  // empty while the document fits

  bool StartObject() { return open(Value::object); }
  bool StartArray() { return open(Value::array); }
  bool EndObject(rapidjson::SizeType) { return close(); }
  bool EndArray(rapidjson::SizeType) { return close(); }
  bool Key(const char* text, rapidjson::SizeType length, bool) {
    Frame& frame = stack_.back();
    frame.key.assign(text, length);
    for (const std::string& seen : frame.seen)
      if (seen == frame.key) return error("the key '" + frame.key + "' appears twice");
    frame.seen.push_back(frame.key);
    return true;
  }
  bool String(const char*, rapidjson::SizeType, bool) { return scalar(Value::string); }
  bool RawNumber(const char*, rapidjson::SizeType, bool) { return scalar(Value::number); }
  bool Null() { return error("a null value"); }
  bool Bool(bool) { return error("a true/false value"); }
  bool Default() { return error("an unexpected value"); }

 private:
  enum class Value { string, number, object, array };
  enum class Layout {
    root,
    tensor_list,
    number_list,
    string_list,
    tensor,
    number_entry,
    string_entry,
    numbers
  };
  struct Frame {
    Layout layout;
    std::string key;
    std::vector<std::string> seen;
  };
  struct Expected {
    Value value;
    Layout layout;  // of the container the value opens
  };

  bool error(const std::string& what) {
    if (problem.empty())
      problem =
          what +
          (stack_.empty() || stack_.back().key.empty() ? "" : " at '" + stack_.back().key + "'");
    return false;
  }

  // What the next value inside the innermost container must be.
  std::optional<Expected> expected() const {
    if (stack_.empty()) return Expected{Value::object, Layout::root};
    const Frame& f = stack_.back();
    switch (f.layout) {
      case Layout::root:
        if (f.key == "kind") return Expected{Value::string, {}};
        if (f.key == "tensors") return Expected{Value::array, Layout::tensor_list};
        if (f.key == "integers" || f.key == "reals")
          return Expected{Value::array, Layout::number_list};
        if (f.key == "strings") return Expected{Value::array, Layout::string_list};
        return std::nullopt;
      case Layout::tensor_list:
        return Expected{Value::object, Layout::tensor};
      case Layout::number_list:
        return Expected{Value::object, Layout::number_entry};
      case Layout::string_list:
        return Expected{Value::object, Layout::string_entry};
      case Layout::tensor:
        if (f.key == "name" || f.key == "dtype") return Expected{Value::string, {}};
        if (f.key == "shape" || f.key == "data") return Expected{Value::array, Layout::numbers};
        return std::nullopt;
      case Layout::number_entry:
        if (f.key == "name") return Expected{Value::string, {}};
        if (f.key == "value") return Expected{Value::number, {}};
        return std::nullopt;
      case Layout::string_entry:
        if (f.key == "name" || f.key == "value") return Expected{Value::string, {}};
        return std::nullopt;
      case Layout::numbers:
        return Expected{Value::number, {}};
    }
    return std::nullopt;
  }

  // A string or number where the layout expects one (value), or the start of an object or array.
  bool scalar(Value value) { return accept(value).has_value(); }

  bool open(Value value) {
    const std::optional<Expected> e = accept(value);
    if (e) stack_.push_back({e->layout, {}, {}});
    return e.has_value();
  }

  // What the layout expects here, if it is `value`; otherwise the error, and nothing.
  std::optional<Expected> accept(Value value) {
    const std::optional<Expected> e = expected();
    if (!e) {
      error("an unknown key");
      return std::nullopt;
    }
    if (e->value == value) return e;
    // What was found where ag writes something else, by Value (string, number, object, array).
    static constexpr const char* found[] = {"a string where ag writes a number",
        "a number where ag writes a string", "an object where ag writes no object",
        "an array where ag writes no array"};
    error(found[static_cast<int>(value)]);
    return std::nullopt;
  }

  bool close() {
    const Frame& f = stack_.back();
    std::size_t required = 0;
    switch (f.layout) {
      case Layout::root:
        required = 5;
        break;
      case Layout::tensor:
        required = 4;
        break;
      case Layout::number_entry:
      case Layout::string_entry:
        required = 2;
        break;
      default:
        break;
    }
    if (f.seen.size() != required) return error("an object without all of its fields");
    stack_.pop_back();
    return true;
  }

  std::vector<Frame> stack_;
};

// A JSON number's text (rapidjson hands numbers over as text) converted exactly.
template <class T>
T json_number(cereal::JSONInputArchive& ar, const std::string& source, const char* what) {
  std::string text;
  ar(text);
  T value{};
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if constexpr (std::is_floating_point_v<T>) {
    // JSON has no "+" or "Infinity" spelt other ways; from_chars takes "inf", "infinity", "nan".
    if (text == "NaN") return std::numeric_limits<T>::quiet_NaN();
    if (text == "Infinity") return std::numeric_limits<T>::infinity();
    if (text == "-Infinity") return -std::numeric_limits<T>::infinity();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    // An out-of-range number is damage, not infinity or zero.
    if (ec != std::errc() || ptr != end)
      fail(source,
          std::string("damaged payload: ") + what + " '" + text + "' is not a number in range");
  } else {
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr != end)
      fail(source,
          std::string("damaged payload: ") + what + " '" + text + "' is not an unsigned integer");
  }
  return value;
}

Checkpoint read_json(std::string_view payload, const std::string& source) {
  if (json_depth(payload) > kMaxJsonDepth) fail(source, "damaged payload: JSON nested too deeply");
  if (has_nul_escape(payload)) fail(source, "damaged payload: a JSON string holds a NUL character");
  // One pass of rapidjson's event parser first: the JSON must parse and have exactly the shape and
  // value types ag writes. Numbers arrive as text (RawNumber), so unlike in cereal's tree they can
  // be told apart from strings: "kind": 5 or "value": "12" is damage, not a conversion.
  {
    JsonSchemaCheck check;
    rapidjson::Reader reader;
    rapidjson::MemoryStream stream(payload.data(), payload.size());
    const rapidjson::ParseResult result =
        reader.Parse<rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseNanAndInfFlag>(
            stream, check);
    if (!check.problem.empty()) fail(source, "damaged payload: " + check.problem);
    if (result.IsError())
      fail(source, "damaged payload: the JSON does not parse (rapidjson error " +
                       std::to_string(result.Code()) + " at byte " +
                       std::to_string(result.Offset()) + ")");
  }
  Budget budget(payload.size(), source);
  std::istringstream in{std::string(payload)};
  cereal::JSONInputArchive ar(in);
  Checkpoint c;
  ar(cereal::make_nvp("kind", c.kind));
  cereal::size_type count = 0;
  ar.setNextName("tensors");
  ar.startNode();
  ar.loadSize(count);
  budget.charge(count, 2, "the tensor list");
  for (cereal::size_type i = 0; i < count; ++i) {
    ar.startNode();
    std::string name, dtype_name;
    ar(cereal::make_nvp("name", name));
    ar(cereal::make_nvp("dtype", dtype_name));
    if (dtype_name != "float32" && dtype_name != "float64")
      fail(source, "damaged payload: tensor '" + name + "' has unknown dtype '" + dtype_name + "'");
    const DType dtype = dtype_name == "float32" ? float32 : float64;
    ar.setNextName("shape");
    ar.startNode();
    cereal::size_type ndim = 0;
    ar.loadSize(ndim);
    budget.charge(ndim, 1, "a tensor's dims");
    ShapeReader dims;
    for (cereal::size_type d = 0; d < ndim; ++d)
      dims.add(json_number<uint64_t>(ar, source, "a dim"), payload.size(), name, source);
    ar.finishNode();
    const uint64_t numel = dims.numel;
    ar.setNextName("data");
    ar.startNode();
    cereal::size_type values = 0;
    ar.loadSize(values);
    if (values != numel)
      fail(source, "damaged payload: tensor '" + name + "' of shape " + shape_str(dims.shape) +
                       " has " + std::to_string(values) + " values");
    budget.charge(numel, 1, "a tensor's data");
    Tensor t = empty(dims.shape, dtype);
    dispatch(dtype, [&]<typename T>() {
      T* p = t.data<T>();
      for (uint64_t e = 0; e < numel; ++e) {
        const double v = json_number<double>(ar, source, "a tensor value");
        p[e] = static_cast<T>(v);
        // A finite value that float32 cannot hold is damage, not infinity.
        if (std::isfinite(v) && !std::isfinite(p[e]))
          fail(source,
              "damaged payload: tensor '" + name + "' holds a value beyond float32's range");
      }
    });
    ar.finishNode();
    ar.finishNode();
    insert_unique(c.tensors, std::move(name), t, source);
  }
  ar.finishNode();
  auto read_list = [&](const char* list, auto& map, auto read_value) {
    ar.setNextName(list);
    ar.startNode();
    cereal::size_type n = 0;
    ar.loadSize(n);
    budget.charge(n, 2, list);
    for (cereal::size_type i = 0; i < n; ++i) {
      ar.startNode();
      std::string name;
      ar(cereal::make_nvp("name", name));
      ar.setNextName("value");
      auto value = read_value();
      ar.finishNode();
      insert_unique(map, std::move(name), std::move(value), source);
    }
    ar.finishNode();
  };
  read_list(
      "integers", c.integers, [&] { return json_number<uint64_t>(ar, source, "an integer"); });
  read_list("reals", c.reals, [&] { return json_number<double>(ar, source, "a real"); });
  read_list("strings", c.strings, [&] {
    std::string value;
    ar(value);
    return value;
  });
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
    payload =
        format == CheckpointFormat::binary ? write_binary(checkpoint) : write_json(checkpoint);
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
                                              : read_json(payload, source);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    // cereal's and rapidjson's own errors (reading past the end, a missing field, a wrong type)
    fail(source, std::string("damaged payload: ") + e.what());
  }
}

Checkpoint parse_checkpoint(std::string_view bytes, const std::string& source) {
  if (bytes.empty()) fail(source, "the file is empty");
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    fail(source, "not an ag checkpoint (its first bytes are not ag's magic number)");
  if (bytes.size() < kHeaderSize)
    fail(source,
        "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the 28-byte header");
  const uint64_t version = get_le(bytes, 8, 4);
  if (version != kFormatVersion)
    fail(source, "format version " + std::to_string(version) +
                     " is not supported (this ag reads version " + std::to_string(kFormatVersion) +
                     ")");
  const uint64_t encoding = get_le(bytes, 12, 4);
  if (encoding > 1) fail(source, "unknown payload encoding " + std::to_string(encoding));
  const uint64_t length = get_le(bytes, 16, 8);
  const uint64_t present = bytes.size() - kHeaderSize;
  if (length != present)
    fail(source,
        (present < length ? "truncated: the header announces " : "damaged: the header announces ") +
            std::to_string(length) + " payload bytes, the file holds " + std::to_string(present));
  const std::string_view payload = bytes.substr(kHeaderSize);
  if (file_crc(bytes.substr(8, 16), payload) != static_cast<uint32_t>(get_le(bytes, 24, 4)))
    fail(source, "damaged: the CRC-32 of the file does not match the one in its header");
  return parse_checkpoint_payload(
      payload, encoding == 0 ? CheckpointFormat::binary : CheckpointFormat::json, source);
}

Checkpoint load_checkpoint(const std::string& path) {
  std::error_code error;
  if (std::filesystem::exists(path, error) && !std::filesystem::is_regular_file(path, error))
    fail(path, "not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) fail(path, "read error");
  return parse_checkpoint(bytes.str(), path);
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
