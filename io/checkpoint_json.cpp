// The JSON encoding of a checkpoint's payload, for reading by eye: the writer, and the reader of
// what may be a damaged or hostile file (io/checkpoint_json.h says what it refuses). The file
// format around it is io/checkpoint.cpp's.
#include "io/checkpoint_json.h"

// The reader walks rapidjson's events itself (rapidjson is the parser under cereal's JSON archive,
// whose writer write_json uses). It asks rapidjson for every number as its text: Debian's
// rapidjson 1.1.0 misreads some (a zero with an exponent, numbers just past DBL_MAX) and reads its
// table of powers of ten out of bounds for others; std::from_chars converts them instead
// (correctly rounded, range-checked).
#include <cereal/archives/json.hpp>
#include <cereal/types/string.hpp>
#include <charconv>
#include <cmath>
#include <cstring>
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

// A tensor's "dtype": dtype_name's words. "float32" and "float64" are what files have always held;
// "int64" and "bool" came with those tensors (an older ag refuses them as unknown dtypes).
const char* dtype_tag(DType dtype) { return dtype_name(dtype); }
std::optional<DType> dtype_of_tag(std::string_view tag) {
  for (const DType dtype : {float32, float64, int64, bool_})
    if (tag == dtype_name(dtype)) return dtype;
  return std::nullopt;
}

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
      if (t.dtype() == int64) {
        for (int64_t v : t.detach().to_vector<int64_t>()) ar(v);  // exact, past 2^53 too
      } else if (t.dtype() == bool_) {
        for (bool v : t.detach().to_vector<bool>()) ar(static_cast<uint64_t>(v));  // 0 or 1
      } else {
        for (double v : t.detach().to_vector<double>())
          ar(v);  // a float32 value is exact as a double
      }
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

// A JSON number's text (rapidjson hands numbers over as text) converted exactly.
template <class T>
T json_number(std::string_view text, const std::string& source, const char* what) {
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
      fail(source, std::string("damaged payload: ") + what + " '" + std::string(text) +
                       "' is not a number in range");
  } else {
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr != end)
      fail(source, std::string("damaged payload: ") + what + " '" + std::string(text) +
                       "' is not an unsigned integer");
  }
  return value;
}

// Reads a checkpoint from rapidjson's events while its parser walks the text: each value is
// checked against the layout write_json produces (io/checkpoint_json.h) where it appears, and
// stored in the Checkpoint at once. No document tree stands between the text and the tensors —
// cereal's JSON archive builds one, and held 1.9 GB for a 100 MB file of zeros — so what the read
// holds is the payload and the Budget's charges (the entries, and a tensor's data).
//
// Numbers arrive as their text (RawNumber) and are converted exactly by json_number: unlike in a
// tree they can be told apart from strings, so "kind": 5 or "value": "12" is damage, not a
// conversion. A value of the wrong type, an unknown key, a key twice or a missing field ends the
// parse with `problem`; a value that does not convert, a shape the data does not fill, a name
// twice throw the CheckpointError at once.
class JsonCheckpointReader
    : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, JsonCheckpointReader> {
 public:
  JsonCheckpointReader(uint64_t payload_size, const std::string& source)
      : payload_size_(payload_size), budget_(payload_size, source), source_(source) {}

  Checkpoint checkpoint;
  std::string problem;  // empty while the document fits the layout

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
  bool String(const char* text, rapidjson::SizeType length, bool) {
    if (!accept(Value::string)) return false;
    // A "\u0000" escape: ag never writes one, and names are C strings to every other tool.
    if (std::memchr(text, '\0', length) != nullptr)
      return error("a JSON string holds a NUL character");
    store_string(std::string(text, length));
    return true;
  }
  bool RawNumber(const char* text, rapidjson::SizeType length, bool) {
    if (!accept(Value::number)) return false;
    store_number(std::string_view(text, length));
    return true;
  }
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
    std::string key;  // the key whose value comes next (objects)
    std::vector<std::string> seen;
  };
  struct Expected {
    Value value;
    Layout layout;  // of the container the value opens
  };

  // The tensor being read. write_json writes its name, dtype and shape before its data, so the
  // data goes straight into the tensor; a hand-edited file may put the data first, and then it
  // waits as its text (charged to the budget) until the shape and dtype say what it converts to.
  struct TensorEntry {
    std::string name;
    std::optional<DType> dtype;
    std::optional<ShapeReader> shape;
    Tensor tensor;        // allocated when the data starts after dtype and shape
    uint64_t values = 0;  // data values read
    uint64_t early_values = 0;
    std::string early_text;  // the data, when it came before dtype or shape: numbers, each + ' '
  };
  // The integer, real or string entry being read.
  struct ListEntry {
    std::string name, string;
    uint64_t integer = 0;
    double real = 0;
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

  bool open(Value value) {
    const std::optional<Expected> e = accept(value);
    if (!e) return false;
    stack_.push_back({e->layout, {}, {}});
    if (e->layout == Layout::tensor) tensor_ = TensorEntry{};
    if (e->layout == Layout::number_entry || e->layout == Layout::string_entry)
      entry_ = ListEntry{};
    if (e->layout == Layout::numbers && in_tensor_key() == "shape") tensor_.shape.emplace();
    if (e->layout == Layout::numbers && in_tensor_key() == "data") start_data();
    return true;
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
    const Layout layout = f.layout;
    stack_.pop_back();
    if (layout == Layout::tensor) finish_tensor();
    if (layout == Layout::number_entry || layout == Layout::string_entry) finish_entry();
    return true;
  }

  // The key of the tensor object a numbers array belongs to ("shape" or "data").
  const std::string& in_tensor_key() const { return stack_[stack_.size() - 2].key; }
  // The list the innermost entry belongs to ("integers", "reals" or "strings").
  const std::string& list() const { return stack_.front().key; }
  std::string tensor_name() const { return tensor_.name.empty() ? "(unnamed)" : tensor_.name; }

  void store_string(std::string text) {
    const Frame& f = stack_.back();
    if (f.layout == Layout::root) {  // "kind"
      budget_.hold(text.size(), "the kind");
      checkpoint.kind = std::move(text);
    } else if (f.layout == Layout::tensor && f.key == "name") {
      tensor_.name = std::move(text);
    } else if (f.layout == Layout::tensor) {  // "dtype"
      tensor_.dtype = dtype_of_tag(text);
      if (!tensor_.dtype)
        fail(source_, "damaged payload: tensor '" + tensor_name() + "' has unknown dtype '" + text +
                          "' (known: float32, float64, int64, bool)");
    } else if (f.key == "name") {
      entry_.name = std::move(text);
    } else {  // a string entry's "value"
      entry_.string = std::move(text);
    }
  }

  void store_number(std::string_view text) {
    const Frame& f = stack_.back();
    if (f.layout == Layout::number_entry) {
      if (list() == "integers")
        entry_.integer = json_number<uint64_t>(text, source_, "an integer");
      else
        entry_.real = json_number<double>(text, source_, "a real");
    } else if (in_tensor_key() == "shape") {
      tensor_.shape->add(
          json_number<uint64_t>(text, source_, "a dim"), payload_size_, tensor_name(), source_);
    } else {
      store_value(text);
    }
  }

  // The data array opens: with dtype and shape known, the tensor is allocated for it — once its
  // element count is one the payload can hold (a value and a comma each) and the budget allows.
  void start_data() {
    if (!tensor_.dtype || !tensor_.shape) return;  // the data comes first: early_data
    const uint64_t numel = tensor_.shape->numel;
    if (numel > payload_size_ / 2 + 1)
      fail(source_, "damaged payload: tensor '" + tensor_name() + "' of shape " +
                        shape_str(tensor_.shape->shape) +
                        " claims more values than the file holds");
    budget_.hold(numel * dtype_size(*tensor_.dtype) + tensor_.name.size(), "the tensors");
    tensor_.tensor = empty(tensor_.shape->shape, *tensor_.dtype);
  }

  void store_value(std::string_view text) {
    if (!tensor_.tensor.defined()) {
      budget_.take(text.size() + 1, "a tensor's data");
      tensor_.early_text.append(text);
      tensor_.early_text += ' ';
      ++tensor_.early_values;
      return;
    }
    if (tensor_.values == tensor_.shape->numel)
      fail(source_, "damaged payload: tensor '" + tensor_name() + "' of shape " +
                        shape_str(tensor_.shape->shape) + " has more values than its shape");
    write_value(tensor_.values++, text);
  }

  // One value's text, converted exactly into the tensor's dtype.
  void write_value(uint64_t at, std::string_view text) {
    const DType dtype = tensor_.tensor.dtype();
    if (dtype == int64) {  // an integer, read as one: 2^53 + 1 stays itself
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || ptr != text.data() + text.size())
        fail(source_, "damaged payload: int64 tensor '" + tensor_name() + "' holds '" +
                          std::string(text) + "', not an integer in int64's range");
      tensor_.tensor.data<int64_t>()[at] = v;
      return;
    }
    if (dtype == bool_) {
      if (text != "0" && text != "1")
        fail(source_, "damaged payload: bool tensor '" + tensor_name() + "' holds '" +
                          std::string(text) + "', not 0 or 1");
      tensor_.tensor.data<bool>()[at] = text == "1";
      return;
    }
    const double v = json_number<double>(text, source_, "a tensor value");
    dispatch(dtype, [&]<typename T>() {
      T& slot = tensor_.tensor.data<T>()[at];
      slot = static_cast<T>(v);
      // A finite value that float32 cannot hold is damage, not infinity.
      if (std::isfinite(v) && !std::isfinite(slot))
        fail(source_,
            "damaged payload: tensor '" + tensor_name() + "' holds a value beyond float32's range");
    });
  }

  void finish_tensor() {
    if (!tensor_.tensor.defined()) {  // the data came before the dtype or the shape
      start_data();
      std::string_view early = tensor_.early_text;
      for (uint64_t i = 0; i < tensor_.early_values; ++i) {
        const std::size_t space = early.find(' ');
        store_value(early.substr(0, space));
        early.remove_prefix(space + 1);
      }
      tensor_.early_text = {};
    }
    if (tensor_.values != tensor_.shape->numel)
      fail(source_, "damaged payload: tensor '" + tensor_name() + "' of shape " +
                        shape_str(tensor_.shape->shape) + " has " + std::to_string(tensor_.values) +
                        " values");
    insert_unique(checkpoint.tensors, std::move(tensor_.name), tensor_.tensor, source_);
    tensor_ = TensorEntry{};
  }

  void finish_entry() {
    budget_.hold(entry_.name.size() + entry_.string.size(), list().c_str());
    if (list() == "integers")
      insert_unique(checkpoint.integers, std::move(entry_.name), entry_.integer, source_);
    else if (list() == "reals")
      insert_unique(checkpoint.reals, std::move(entry_.name), entry_.real, source_);
    else
      insert_unique(checkpoint.strings, std::move(entry_.name), std::move(entry_.string), source_);
  }

  uint64_t payload_size_;
  Budget budget_;
  const std::string& source_;
  std::vector<Frame> stack_;
  TensorEntry tensor_;
  ListEntry entry_;
};

}  // namespace

Checkpoint read_json(std::string_view payload, const std::string& source) {
  if (json_depth(payload) > kMaxJsonDepth) fail(source, "damaged payload: JSON nested too deeply");
  JsonCheckpointReader reader(payload.size(), source);
  rapidjson::Reader parser;
  rapidjson::MemoryStream stream(payload.data(), payload.size());
  const rapidjson::ParseResult result =
      parser.Parse<rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseNanAndInfFlag>(
          stream, reader);
  if (!reader.problem.empty()) fail(source, "damaged payload: " + reader.problem);
  if (result.IsError())
    fail(source, "damaged payload: the JSON does not parse (rapidjson error " +
                     std::to_string(result.Code()) + " at byte " + std::to_string(result.Offset()) +
                     ")");
  return std::move(reader.checkpoint);
}

}  // namespace ag::checkpoint_payload
