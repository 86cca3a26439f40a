// The JSON encoding of a checkpoint's payload, for reading by eye: the writer, and the reader of
// what may be a damaged or hostile file (io/checkpoint_json.h says what it refuses). The file
// format around it is io/checkpoint.cpp's.
#include "io/checkpoint_json.h"

// rapidjson (under cereal's JSON archive) must not convert numbers itself: Debian's rapidjson
// 1.1.0 misreads some (a zero with an exponent, numbers just past DBL_MAX) and reads its table of
// powers of ten out of bounds for others. With this flag it hands over every number as its text,
// which read_json converts with std::from_chars (correctly rounded, range-checked).
#define RAPIDJSON_PARSE_DEFAULT_FLAGS kParseNumbersAsStringsFlag | kParseNanAndInfFlag

#include <cereal/archives/json.hpp>
#include <cereal/types/string.hpp>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>
#include <vector>

#include "autograd/autograd.h"

namespace ag::checkpoint_payload {

namespace {

// Our own documents nest 4 deep (root, array, entry, array); anything deeper is not ours, and
// rapidjson's recursive parser must not be handed arbitrarily deep input.
constexpr int kMaxJsonDepth = 16;

const char* dtype_tag(DType dtype) { return dtype == float32 ? "float32" : "float64"; }

}  // namespace

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

namespace {

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

// Checks, event by event, that a JSON document has the layout write_json produces
// (io/checkpoint_json.h).
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

}  // namespace

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
    budget.hold(numel * dtype_size(dtype) + name.size(), "the tensors");
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
      budget.hold(name.size(), list);
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

}  // namespace ag::checkpoint_payload
