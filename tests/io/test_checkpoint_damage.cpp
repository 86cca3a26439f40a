// Damaged, truncated, foreign and hostile checkpoint files: each is a CheckpointError with a clear
// message — never a crash, a hang, an allocation the input does not warrant, another exception
// type, or silently wrong numbers.
//
// The file-level tests go through parse_checkpoint (header, length, CRC-32); the payload-level
// tests go through parse_checkpoint_payload, past the CRC, as a fuzzer would. The checkpoint is
// kept small (a few hundred bytes) so that every truncation and every bit flip runs in a few
// seconds, also under AddressSanitizer.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <typeinfo>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "io/checkpoint.h"

using namespace ag;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kHeader = 28;
const std::string kMagic(
    "\x89"
    "AGC\r\n\x1a\n",
    8);
constexpr double kInf = std::numeric_limits<double>::infinity();

const char* format_name(CheckpointFormat f) {
  return f == CheckpointFormat::binary ? "binary" : "json";
}

// A small checkpoint with the awkward values: a 0-dim and an empty tensor, a non-contiguous view,
// -0.0, subnormals, the extremes, ±inf, integers beyond 2^53, strings that look like JSON.
Checkpoint sample() {
  Checkpoint c;
  c.kind = "damage-test";
  c.tensors["layer.weight"] =
      tensor({1.5, -0.0, 1e-40, std::numeric_limits<float>::max(), -kInf, 0.1}, {2, 3}, float32);
  // (-3e300, not -1e300: one bit flip makes "-1e300" the "-0e300" that rapidjson misreads — see
  // the test of JSON numbers below — and under UBSan that would end the bit-flip sweeps early.)
  c.tensors["layer.bias"] = tensor({0.1, 1.0 / 3.0, 5e-324, -3e300}, {4}, float64);
  c.tensors["scale"] = scalar_tensor(2.5, float32);                        // 0-dim
  c.tensors["empty"] = zeros({0, 3}, float64);                             // no elements
  c.tensors["t"] = tensor({1, 2, 3, 4}, {2, 2}, float64).transpose(0, 1);  // a non-contiguous view
  // int64 past 2^53 (a double would round 2^53 + 1) and at its extremes; bool, as a view too.
  c.tensors["ids"] = tensor(std::vector<int64_t>{(int64_t{1} << 53) + 1, INT64_MIN, INT64_MAX, -1});
  c.tensors["mask"] = tensor(std::vector<bool>{true, false, false, true}, {2, 2}).transpose(0, 1);
  c.integers["step"] = 12345;
  c.integers["seed"] = std::numeric_limits<uint64_t>::max();
  c.integers["odd"] = (uint64_t{1} << 53) + 1;  // not a double
  c.integers["zero"] = 0;
  c.reals["lr"] = 1e-3;
  c.reals["third"] = 1.0 / 3.0;
  c.reals["neg_zero"] = -0.0;
  c.reals["tiny"] = 5e-324;
  c.reals["inf"] = kInf;
  c.reals["max"] = std::numeric_limits<double>::max();
  c.strings["name"] = "héllo ✓";
  c.strings["empty"] = "";
  c.strings["ends_in_backslash"] = "C:\\";
  c.strings["brackets"] = "\"[[[[[[[[[[[[[[[[[[[[{{{{{{{{{{";  // deeper than any real document
  c.strings["controls"] = "tab\there\nnew line\x01";
  return c;
}

// Every value of `b` is bit for bit the value of `a`; returns the first difference ("" if none).
std::string difference(const Checkpoint& a, const Checkpoint& b) {
  if (a.kind != b.kind) return "kind '" + a.kind + "' became '" + b.kind + "'";
  if (a.tensors.size() != b.tensors.size()) return "tensor count differs";
  for (const auto& [name, ta] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end()) return "tensor '" + name + "' is missing";
    const Tensor& tb = it->second;
    if (ta.dtype() != tb.dtype()) return "tensor '" + name + "' changed dtype";
    if (ta.shape() != tb.shape())
      return "tensor '" + name + "' changed shape " + shape_str(ta.shape()) + " -> " +
             shape_str(tb.shape());
    const bool same = dispatch_all(ta.dtype(), [&]<typename T>() {
      std::vector<T> va = ta.to_vector<T>(), vb = tb.to_vector<T>();
      if constexpr (std::is_same_v<T, bool>)
        return va == vb;  // (std::vector<bool> has no data())
      else
        return va.size() == vb.size() &&
               (va.empty() || std::memcmp(va.data(), vb.data(), va.size() * sizeof(T)) == 0);
    });
    if (!same) return "tensor '" + name + "' changed values: " + ta.str() + " -> " + tb.str();
  }
  if (a.integers != b.integers) return "integers differ";
  if (a.reals.size() != b.reals.size()) return "real count differs";
  for (const auto& [name, v] : a.reals) {
    auto it = b.reals.find(name);
    if (it == b.reals.end()) return "real '" + name + "' is missing";
    if (std::bit_cast<uint64_t>(v) != std::bit_cast<uint64_t>(it->second))
      return "real '" + name + "' changed bits";
  }
  for (const auto& [name, v] : a.strings) {
    auto it = b.strings.find(name);
    if (it == b.strings.end()) return "string '" + name + "' is missing";
    if (v != it->second)
      return "string '" + name + "' of " + std::to_string(v.size()) + " bytes came back as " +
             std::to_string(it->second.size()) + " bytes";
  }
  if (a.strings.size() != b.strings.size()) return "string count differs";
  return "";
}

std::string hex(std::string_view bytes, std::size_t limit = 64) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  if (bytes.size() > limit) out += "… (" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

// What a parse did: gave a checkpoint, threw CheckpointError, or did something it must not.
struct Outcome {
  enum Kind { parsed, rejected, wrong } kind;
  std::string message;  // CheckpointError's what(), or a description of the wrong exception
  std::optional<Checkpoint> checkpoint;
};

Outcome attempt(const std::function<Checkpoint()>& parse) {
  try {
    return {Outcome::parsed, "", parse()};
  } catch (const CheckpointError& e) {
    return {Outcome::rejected, e.what(), std::nullopt};
  } catch (const std::exception& e) {
    return {Outcome::wrong,
        std::string("threw ") + typeid(e).name() + " (not a CheckpointError): " + e.what(),
        std::nullopt};
  } catch (...) {
    return {Outcome::wrong, "threw something that is not a std::exception", std::nullopt};
  }
}

Outcome file(std::string_view bytes) {
  return attempt([&] { return parse_checkpoint(bytes); });
}
Outcome payload(std::string_view bytes, CheckpointFormat format) {
  return attempt([&] { return parse_checkpoint_payload(bytes, format); });
}

// Collects the failures of a sweep, keeping the first few for the report.
class Failures {
 public:
  void add(std::string what) {
    if (++count_ <= 12) list_ += "\n  " + what;
  }
  std::size_t count() const { return count_; }
  std::string report() const { return std::to_string(count_) + " failure(s):" + list_; }

 private:
  std::size_t count_ = 0;
  std::string list_;
};
#define CHECK_NO_FAILURES(failures) \
  do {                              \
    INFO((failures).report());      \
    CHECK((failures).count() == 0); \
  } while (0)

// Whatever a payload parses to must be something its bytes can hold: every tensor well formed
// and readable, none with more elements than the payload has bytes. Returns "" if so.
std::string implausible(const Checkpoint& c, std::size_t payload_size) {
  std::size_t string_bytes = c.kind.size();
  for (const auto& [name, t] : c.tensors) {
    if (!t.defined()) return "tensor '" + name + "' is undefined";
    // The product of the dims (zeros counted as 1, as for the strides) must fit in int64, or
    // numel() and contiguous_strides() overflow.
    int64_t span = 1;
    bool has_zero = false;
    for (int64_t size : t.shape()) {
      if (size < 0) return "tensor '" + name + "' has a negative dim";
      has_zero = has_zero || size == 0;
      if (__builtin_mul_overflow(span, std::max<int64_t>(size, 1), &span))
        return "tensor '" + name + "' of shape " + shape_str(t.shape()) +
               ": the product of its dims overflows int64 (so do its numel and strides)";
    }
    const int64_t n = has_zero ? 0 : span;
    if (t.numel() != n)
      return "tensor '" + name + "' has numel " + std::to_string(t.numel()) + " for shape " +
             shape_str(t.shape());
    if (static_cast<uint64_t>(t.numel()) > payload_size)
      return "tensor '" + name + "' has " + std::to_string(t.numel()) +
             " elements from a payload of " + std::to_string(payload_size) + " bytes";
    const Tensor& tensor = t;  // (a lambda cannot capture a structured binding in clang 14)
    const std::size_t read =
        dispatch_all(t.dtype(), [&]<typename T>() { return tensor.to_vector<T>().size(); });
    if (read != static_cast<std::size_t>(n)) return "tensor '" + name + "' is not readable";
    // A bool's bytes are 0 or 1: any other byte in a C++ bool is undefined behaviour.
    if (t.dtype() == bool_) {
      const Tensor dense = t.contiguous();
      const auto* bytes = static_cast<const unsigned char*>(dense.raw_data());
      for (int64_t i = 0; i < n; ++i)
        if (bytes[i] > 1)
          return "bool tensor '" + name + "' holds the byte " + std::to_string(bytes[i]);
    }
    string_bytes += name.size();
  }
  for (const auto& [name, v] : c.strings) string_bytes += name.size() + v.size();
  if (string_bytes > payload_size) return "the strings hold more bytes than the payload";
  return "";
}

// Checks one payload-level outcome: CheckpointError, or a plausible checkpoint.
void judge_payload(
    const Outcome& o, std::size_t payload_size, const std::string& what, Failures& failures) {
  if (o.kind == Outcome::wrong) {
    failures.add(what + ": " + o.message);
  } else if (o.kind == Outcome::parsed) {
    const std::string problem = implausible(*o.checkpoint, payload_size);
    if (!problem.empty()) failures.add(what + ": parsed, but " + problem);
  }
}

// A portable-binary payload written by hand (cereal's layout: an endianness byte, then
// little- or big-endian fields), for payloads the writer would never produce.
class BinaryPayload {
 public:
  explicit BinaryPayload(bool little_endian = true) : little_(little_endian) {
    bytes_ += static_cast<char>(little_endian ? 1 : 0);
  }
  BinaryPayload& u8(uint8_t v) {
    bytes_ += static_cast<char>(v);
    return *this;
  }
  BinaryPayload& u64(uint64_t v) { return raw(v, 8); }
  BinaryPayload& f32(float v) { return raw(std::bit_cast<uint32_t>(v), 4); }
  BinaryPayload& f64(double v) { return raw(std::bit_cast<uint64_t>(v), 8); }
  BinaryPayload& str(std::string_view s) {
    u64(s.size());
    bytes_ += s;
    return *this;
  }
  BinaryPayload& bytes(std::string_view s) {
    bytes_ += s;
    return *this;
  }
  const std::string& get() const { return bytes_; }

 private:
  BinaryPayload& raw(uint64_t v, int width) {
    for (int i = 0; i < width; ++i) {
      const int shift = little_ ? 8 * i : 8 * (width - 1 - i);
      bytes_ += static_cast<char>((v >> shift) & 0xff);
    }
    return *this;
  }
  bool little_;
  std::string bytes_;
};

// The start of a binary payload: kind "k", then the tensor count.
BinaryPayload binary_start(uint64_t tensor_count, bool little_endian = true) {
  BinaryPayload p(little_endian);
  p.str("k").u64(tensor_count);
  return p;
}
// The end of a binary payload: no integers, reals or strings.
std::string binary_end(BinaryPayload p) { return p.u64(0).u64(0).u64(0).get(); }

// A compact JSON payload in the writer's layout.
std::string json_doc(const std::string& tensors, const std::string& integers = "[]",
    const std::string& reals = "[]", const std::string& strings = "[]",
    const std::string& kind = "\"k\"") {
  return "{\"kind\":" + kind + ",\"tensors\":" + tensors + ",\"integers\":" + integers +
         ",\"reals\":" + reals + ",\"strings\":" + strings + "}";
}
std::string json_tensor(const std::string& shape, const std::string& data,
    const std::string& dtype = "\"float32\"", const std::string& name = "\"t\"") {
  return "{\"name\":" + name + ",\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data\":" + data +
         "}";
}

std::string payload_of(const std::string& file_bytes) { return file_bytes.substr(kHeader); }

}  // namespace

// ---- whole files --------------------------------------------------------------------------------

TEST_CASE("a small checkpoint round-trips bit for bit in both formats", "[checkpoint][damage]") {
  const Checkpoint original = sample();
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    INFO("format " << format_name(format));
    const std::string bytes = serialize_checkpoint(original, format);
    CHECK(bytes.size() <
          (format == CheckpointFormat::binary ? 1000u : 4000u));  // small enough for every bit flip
    CHECK(bytes.compare(0, 8, kMagic) == 0);
    const Checkpoint back = parse_checkpoint(bytes);
    CHECK(difference(original, back) == "");
    // Writing what was read gives the same bytes again.
    CHECK(serialize_checkpoint(back, format) == bytes);
    // And the payload alone parses to the same.
    CHECK(difference(original, parse_checkpoint_payload(payload_of(bytes), format)) == "");
  }
  // A NaN keeps its bits in binary; JSON keeps at least that it is a NaN.
  Checkpoint c;
  c.kind = "nan";
  c.reals["nan"] = std::bit_cast<double>(uint64_t{0xfff8'0000'dead'beef});
  c.tensors["nan"] = tensor({std::nan("")}, {1}, float32);
  const Checkpoint binary = parse_checkpoint(serialize_checkpoint(c, CheckpointFormat::binary));
  CHECK(std::bit_cast<uint64_t>(binary.real("nan")) == 0xfff8'0000'dead'beefu);
  CHECK(std::isnan(binary.tensor("nan").item()));
  const Checkpoint json = parse_checkpoint(serialize_checkpoint(c, CheckpointFormat::json));
  CHECK(std::isnan(json.real("nan")));
  CHECK(std::isnan(json.tensor("nan").item()));
}

TEST_CASE("many random doubles and floats round-trip bit for bit in both formats",
    "[checkpoint][damage]") {
  std::mt19937_64 rng(20240611);
  Checkpoint c;
  c.kind = "random";
  // Random bit patterns (every exponent, subnormals, infinities), then values like weights.
  std::vector<double> doubles, floats;
  std::normal_distribution<double> normal(0.0, 0.05);
  for (int i = 0; i < 2000; ++i) {
    double d;
    do d = i < 1000 ? std::bit_cast<double>(rng()) : normal(rng);
    while (std::isnan(d));
    doubles.push_back(d);
    float f;
    do
      f = i < 1000 ? std::bit_cast<float>(static_cast<uint32_t>(rng()))
                   : static_cast<float>(normal(rng));
    while (std::isnan(f));
    floats.push_back(f);
  }
  c.tensors["d"] = tensor(doubles, {40, 50}, float64);
  c.tensors["f"] = tensor(floats, {2000}, float32);
  for (int i = 0; i < 50; ++i)
    c.reals["r" + std::to_string(i)] = doubles[static_cast<std::size_t>(i)];
  for (int i = 0; i < 50; ++i) c.integers["i" + std::to_string(i)] = rng();
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    INFO("format " << format_name(format));
    CHECK(difference(c, parse_checkpoint(serialize_checkpoint(c, format))) == "");
  }
}

TEST_CASE(
    "every truncation of a checkpoint file is rejected as truncated", "[checkpoint][damage]") {
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    const std::string bytes = serialize_checkpoint(sample(), format);
    Failures failures;
    for (std::size_t length = 0; length < bytes.size(); ++length) {
      const Outcome o = file(std::string_view(bytes).substr(0, length));
      const std::string what = std::string(format_name(format)) + " file cut to " +
                               std::to_string(length) + " of " + std::to_string(bytes.size()) +
                               " bytes";
      const char* expected = length == 0 ? "the file is empty"
                             : length < 8
                                 ? "not an ag checkpoint"  // not even the whole magic number
                                 : "truncated";
      if (o.kind != Outcome::rejected)
        failures.add(what + ": " + (o.kind == Outcome::parsed ? "parsed" : o.message));
      else if (o.message.find(expected) == std::string::npos)
        failures.add(what + ": message '" + o.message + "' does not say '" + expected + "'");
    }
    CHECK_NO_FAILURES(failures);
  }
}

TEST_CASE("every single-bit flip of a checkpoint file is rejected", "[checkpoint][damage]") {
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    const std::string bytes = serialize_checkpoint(sample(), format);
    Failures failures;
    std::string damaged = bytes;
    for (std::size_t at = 0; at < bytes.size(); ++at) {
      for (int bit = 0; bit < 8; ++bit) {
        damaged[at] = static_cast<char>(bytes[at] ^ (1 << bit));
        const Outcome o = file(damaged);
        damaged[at] = bytes[at];
        const std::string what = std::string(format_name(format)) + " file, byte " +
                                 std::to_string(at) + " bit " + std::to_string(bit);
        // Which check must catch it: the header's fields are checked one by one, the rest by the
        // CRC, which covers the version, encoding and length fields too. The encoding's low bit
        // swaps binary and JSON, a valid encoding: the CRC catches that one.
        const char* expected = at < 8    ? "not an ag checkpoint"
                               : at < 12 ? "format version"
                               : at < 16
                                   ? (at == 12 && bit == 0 ? "CRC-32" : "unknown payload encoding")
                               : at < 24 ? "the header announces"
                                         : "CRC-32";
        if (o.kind != Outcome::rejected)
          failures.add(what + ": " + (o.kind == Outcome::parsed ? "parsed" : o.message));
        else if (o.message.find(expected) == std::string::npos)
          failures.add(what + ": message '" + o.message + "' does not say '" + expected + "'");
      }
    }
    CHECK_NO_FAILURES(failures);
  }
}

TEST_CASE("random files are rejected as checkpoints", "[checkpoint][damage]") {
  std::mt19937_64 rng(42);
  auto random_bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  auto header = [](uint32_t encoding, std::string_view payload) {
    std::string h = kMagic;
    for (int i = 0; i < 4; ++i) h += static_cast<char>(i == 0 ? 1 : 0);  // version 1
    for (int i = 0; i < 4; ++i) h += static_cast<char>((encoding >> (8 * i)) & 0xff);
    for (int i = 0; i < 8; ++i) h += static_cast<char>((payload.size() >> (8 * i)) & 0xff);
    // The CRC covers the version, encoding and length fields and then the payload.
    const uint32_t crc = ag::crc32(h.substr(8) + std::string(payload));
    for (int i = 0; i < 4; ++i) h += static_cast<char>((crc >> (8 * i)) & 0xff);
    return h + std::string(payload);
  };
  Failures failures;
  auto expect = [&](const std::string& bytes, const char* expected, const std::string& what) {
    const Outcome o = file(bytes);
    if (o.kind != Outcome::rejected)
      failures.add(
          what + " " + hex(bytes) + ": " + (o.kind == Outcome::parsed ? "parsed" : o.message));
    else if (o.message.find(expected) == std::string::npos)
      failures.add(what + ": message '" + o.message + "' does not say '" + expected + "'");
  };
  std::vector<std::size_t> sizes;
  for (std::size_t n = 1; n <= 64; ++n) sizes.push_back(n);
  for (std::size_t n : {100, 1000, 4096, 65536}) sizes.push_back(n);
  for (std::size_t n : sizes) {
    for (int k = 0; k < 4; ++k) {
      const std::string what = "random file of " + std::to_string(n) + " bytes";
      std::string bytes = random_bytes(n);
      if (bytes[0] == kMagic[0]) bytes[0] = 'x';
      expect(bytes, "not an ag checkpoint", what);
      expect(kMagic + bytes, "", "random bytes behind the magic, " + what);
      // A header that is right for its random payload: the payload parser itself must refuse.
      expect(header(0, bytes), "damaged payload",
          "a valid header over a random binary payload, " + what);
      expect(header(1, bytes), "damaged payload",
          "a valid header over a random JSON payload, " + what);
    }
  }
  CHECK_NO_FAILURES(failures);
}

TEST_CASE("files of other kinds are not checkpoints", "[checkpoint][damage]") {
  const std::string json_payload =
      payload_of(serialize_checkpoint(sample(), CheckpointFormat::json));
  const std::vector<std::pair<std::string, std::string>> files = {
      {"PNG", std::string(
                  "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89",
                  33)},
      {"text", "This is a text file.\nIt has two lines.\n"},
      {"JSON", "{\"kind\": \"model\", \"tensors\": []}\n"},
      {"a bare JSON payload", json_payload},
      {"a bare binary payload",
          payload_of(serialize_checkpoint(sample(), CheckpointFormat::binary))},
      {"gzip", std::string("\x1f\x8b\x08\0\0\0\0\0\0\x03", 10)},
      {"ELF", std::string("\x7f"
                          "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0",
                  16)},
      {"UTF-8 BOM + JSON", "\xef\xbb\xbf" + json_payload},
      {"one NUL byte", std::string(1, '\0')},
      {"28 NUL bytes", std::string(28, '\0')},
      // The magic mangled as a text-mode transfer would: CR LF -> LF, or the high bit stripped.
      {"magic with CRLF -> LF",
          "\x89"
          "AGC\n\x1a\n" +
              std::string(20, '\0')},
      {"magic with the high bit stripped",
          "\x09"
          "AGC\r\n\x1a\n" +
              std::string(20, '\0')},
  };
  for (const auto& [kind, bytes] : files) {
    INFO("a " << kind << " file: " << hex(bytes));
    CHECK_THROWS_WITH(parse_checkpoint(bytes), Contains("not an ag checkpoint"));
    CHECK_THROWS_AS(parse_checkpoint(bytes), CheckpointError);
  }
  CHECK_THROWS_AS(parse_checkpoint(""), CheckpointError);
  CHECK_THROWS_WITH(parse_checkpoint("", "model.agc"), Contains("model.agc") && Contains("empty"));
  CHECK_THROWS_WITH(parse_checkpoint(kMagic), Contains("truncated"));  // the magic and nothing else
}

TEST_CASE("a checkpoint file with trailing garbage is rejected", "[checkpoint][damage]") {
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    INFO("format " << format_name(format));
    const std::string bytes = serialize_checkpoint(sample(), format);
    for (const std::string& tail :
        {std::string("x"), std::string(1, '\0'), std::string("\n"), bytes}) {
      INFO("followed by " << hex(tail, 8));
      CHECK_THROWS_AS(parse_checkpoint(bytes + tail), CheckpointError);
      CHECK_THROWS_WITH(
          parse_checkpoint(bytes + tail), Contains("damaged") && Contains("the header announces"));
    }
  }
}

TEST_CASE("load_checkpoint: a missing path or a folder or a truncated file is a clear error",
    "[checkpoint][damage]") {
  const std::string missing = "/nonexistent-ag-folder/no-such-checkpoint.agc";
  CHECK_THROWS_AS(load_checkpoint(missing), CheckpointError);
  CHECK_THROWS_WITH(load_checkpoint(missing),
      Contains(missing) && Contains("cannot open") && Contains("No such file"));
  CHECK_THROWS_AS(load_checkpoint(fs::temp_directory_path().string()), CheckpointError);

  std::string pattern = (fs::temp_directory_path() / "ag-damage-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  const fs::path folder = pattern;
  const std::string path = (folder / "cut.agc").string();
  save_checkpoint(sample(), path);
  CHECK(difference(sample(), load_checkpoint(path)) == "");
  fs::resize_file(path, fs::file_size(path) - 1);
  CHECK_THROWS_WITH(load_checkpoint(path), Contains(path) && Contains("truncated"));
  fs::resize_file(path, 0);
  CHECK_THROWS_WITH(load_checkpoint(path), Contains(path) && Contains("empty"));
  fs::remove_all(folder);
}

// ---- payloads, past the CRC ---------------------------------------------------------------------

TEST_CASE(
    "checkpoint binary payload: every truncation is rejected and every bit flip parses plausibly "
    "or is rejected",
    "[checkpoint][damage][payload]") {
  const std::string p = payload_of(serialize_checkpoint(sample(), CheckpointFormat::binary));
  Failures failures;
  for (std::size_t length = 0; length < p.size(); ++length) {
    const Outcome o = payload(std::string_view(p).substr(0, length), CheckpointFormat::binary);
    if (o.kind != Outcome::rejected)
      failures.add("binary payload cut to " + std::to_string(length) +
                   " bytes: " + (o.kind == Outcome::parsed ? "parsed" : o.message));
  }
  std::string damaged = p;
  for (std::size_t at = 0; at < p.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      damaged[at] = static_cast<char>(p[at] ^ (1 << bit));
      judge_payload(payload(damaged, CheckpointFormat::binary), p.size(),
          "binary payload, byte " + std::to_string(at) + " bit " + std::to_string(bit), failures);
      damaged[at] = p[at];
    }
  }
  // Every byte set to 0x00 and to 0xff.
  for (std::size_t at = 0; at < p.size(); ++at) {
    for (char value : {'\0', '\xff'}) {
      damaged[at] = value;
      judge_payload(payload(damaged, CheckpointFormat::binary), p.size(),
          "binary payload, byte " + std::to_string(at) + " set to " + hex(std::string(1, value)),
          failures);
      damaged[at] = p[at];
    }
  }
  CHECK_NO_FAILURES(failures);
}

TEST_CASE(
    "checkpoint binary payload: hand-written hostile payloads", "[checkpoint][damage][payload]") {
  // The hand-written layout is the writer's.
  Checkpoint small;
  small.kind = "k";
  small.tensors["t"] = tensor({1, 2}, {2}, float32);
  const std::string valid = binary_end(binary_start(1).str("t").u8(0).u64(1).u64(2).f32(1).f32(2));
  REQUIRE(valid == payload_of(serialize_checkpoint(small, CheckpointFormat::binary)));
  CHECK(difference(small, parse_checkpoint_payload(valid, CheckpointFormat::binary)) == "");
  // A big-endian payload (as a big-endian machine writes it) reads as the same values.
  const std::string big =
      binary_end(binary_start(1, false).str("t").u8(0).u64(1).u64(2).f32(1).f32(2));
  CHECK(difference(small, parse_checkpoint_payload(big, CheckpointFormat::binary)) == "");

  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"a kind of 2^64-1 bytes", BinaryPayload().u64(huge).get()},
      {"a kind one byte longer than the payload", BinaryPayload().u64(9).bytes("12345678").get()},
      {"2^63 tensors", binary_start(uint64_t{1} << 63).get()},
      {"2^64-1 tensors", binary_start(huge).get()},
      {"a tensor name of 2^62 bytes", binary_start(1).u64(uint64_t{1} << 62).get()},
      {"dtype code 4", binary_end(binary_start(1).str("t").u8(4).u64(0).f64(1))},
      {"a bool byte of 2",
          binary_end(binary_start(1).str("t").u8(3).u64(1).u64(3).u8(1).u8(0).u8(2))},
      {"a bool byte of 255", binary_end(binary_start(1).str("t").u8(3).u64(0).u8(255))},
      {"int64 data cut short", binary_end(binary_start(1).str("t").u8(2).u64(1).u64(2).u64(7))},
      {"dtype code 255", binary_end(binary_start(1).str("t").u8(255).u64(0).f64(1))},
      {"2^40 dims", binary_start(1).str("t").u8(0).u64(uint64_t{1} << 40).get()},
      {"a dim of 2^62", binary_end(binary_start(1).str("t").u8(0).u64(1).u64(uint64_t{1} << 62))},
      {"a dim of 2^64-1", binary_end(binary_start(1).str("t").u8(0).u64(1).u64(huge))},
      {"dims whose product overflows 64 bits",
          binary_end(
              binary_start(1).str("t").u8(1).u64(2).u64(uint64_t{1} << 32).u64(uint64_t{1} << 32))},
      {"dims whose product overflows 64 bits to 0",
          binary_end(
              binary_start(1).str("t").u8(1).u64(4).u64(65536).u64(65536).u64(65536).u64(65536))},
      {"a shape claiming more data than there is",
          binary_end(binary_start(1).str("t").u8(1).u64(1).u64(1000).f64(1))},
      {"a shape claiming one element more than there is",
          binary_end(binary_start(1).str("t").u8(0).u64(1).u64(3).f32(1).f32(2))},
      {"a tensor with an empty name", binary_end(binary_start(1).str("").u8(0).u64(0).f32(1))},
      {"two tensors of the same name",
          binary_end(binary_start(2).str("t").u8(0).u64(0).f32(1).str("t").u8(0).u64(0).f32(2))},
      {"2^64-1 integers", binary_start(0).u64(huge).get()},
      {"two integers of the same name",
          binary_start(0).u64(2).str("i").u64(1).str("i").u64(2).u64(0).u64(0).get()},
      {"2^64-1 reals", binary_start(0).u64(0).u64(huge).get()},
      {"2^64-1 strings", binary_start(0).u64(0).u64(0).u64(huge).get()},
      {"a string value of 2^64-1 bytes",
          binary_start(0).u64(0).u64(0).u64(1).str("s").u64(huge).get()},
      {"a string with an empty name", binary_start(0).u64(0).u64(0).u64(1).str("").str("v").get()},
      {"one byte after the end", valid + "x"},
      {"a whole second payload after the end", valid + valid},
      {"no bytes", ""},
      {"the endianness byte alone", std::string(1, '\x01')},
  };
  for (const auto& [what, bytes] : hostile) {
    INFO("binary payload with " << what << ": " << hex(bytes));
    const Outcome o = payload(bytes, CheckpointFormat::binary);
    INFO(o.message);
    CHECK(o.kind == Outcome::rejected);
    CHECK_THAT(o.message, Contains("damaged payload"));
  }
}

TEST_CASE("checkpoint binary payload: random payloads parse plausibly or are rejected",
    "[checkpoint][damage][payload]") {
  std::mt19937_64 rng(7);
  Failures failures;
  const std::string valid = payload_of(serialize_checkpoint(sample(), CheckpointFormat::binary));
  for (int k = 0; k < 3000; ++k) {
    std::string bytes;
    if (k % 2 == 0) {  // random bytes, mostly small values so that counts and sizes look plausible
      bytes.resize(rng() % 200);
      for (char& c : bytes) c = static_cast<char>(rng() % 4 == 0 ? rng() : rng() % 3);
    } else {  // the valid payload with a few bytes changed
      bytes = valid;
      for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n)
        bytes[rng() % bytes.size()] = static_cast<char>(rng() % 3 == 0 ? rng() % 4 : rng());
    }
    judge_payload(payload(bytes, CheckpointFormat::binary), bytes.size(),
        "random binary payload " + hex(bytes), failures);
  }
  CHECK_NO_FAILURES(failures);
}

TEST_CASE(
    "checkpoint JSON payload: every truncation and every bit flip parses plausibly or is rejected",
    "[checkpoint][damage][payload]") {
  const std::string p = payload_of(serialize_checkpoint(sample(), CheckpointFormat::json));
  Failures failures;
  for (std::size_t length = 0; length < p.size(); ++length) {
    const Outcome o = payload(std::string_view(p).substr(0, length), CheckpointFormat::json);
    judge_payload(o, length, "JSON payload cut to " + std::to_string(length) + " bytes", failures);
    // Only whitespace may be cut from the end of a document that still parses.
    if (o.kind == Outcome::parsed && p.find_first_not_of(" \t\r\n", length) != std::string::npos)
      failures.add("JSON payload cut to " + std::to_string(length) + " bytes parsed");
  }
  std::string damaged = p;
  for (std::size_t at = 0; at < p.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      damaged[at] = static_cast<char>(p[at] ^ (1 << bit));
      judge_payload(payload(damaged, CheckpointFormat::json), p.size(),
          "JSON payload, byte " + std::to_string(at) + " bit " + std::to_string(bit), failures);
      damaged[at] = p[at];
    }
  }
  CHECK_NO_FAILURES(failures);
}

TEST_CASE("checkpoint JSON payload: hand-written hostile documents are rejected",
    "[checkpoint][damage][payload]") {
  const std::string one = json_tensor("[2]", "[1,2]");
  const std::string valid = json_doc("[" + one + "]");
  REQUIRE(parse_checkpoint_payload(valid, CheckpointFormat::json).tensor("t").to_vector<double>() ==
          std::vector<double>{1, 2});
  const std::string deep_arrays = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_objects = [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "{\"a\":";
    return s + "1" + std::string(100000, '}');
  }();
  const std::vector<std::pair<std::string, std::string>> hostile = {
      // Nesting: refused before rapidjson's recursive parser sees it.
      {"arrays 100000 deep", deep_arrays},
      {"arrays 100000 deep, unclosed", std::string(100000, '[')},
      {"objects 100000 deep", deep_objects},
      {"arrays 100000 deep as the kind", json_doc("[]", "[]", "[]", "[]", deep_arrays)},
      {"arrays 100000 deep as tensor data", json_doc("[" + json_tensor("[1]", deep_arrays) + "]")},
      {"arrays 17 deep", std::string(17, '[') + std::string(17, ']')},
      // Not a document, or not an object.
      {"nothing", ""},
      {"whitespace", "  \n\t "},
      {"null", "null"},
      {"a number", "5"},
      {"a string", "\"kind\""},
      {"an empty array", "[]"},
      {"an array of the fields' values", "[\"k\",[],[],[],[]]"},
      {"an empty object", "{}"},
      {"a document followed by another", valid + valid},
      {"a document followed by garbage", valid + "x"},
      {"an unterminated string", "{\"kind\":\"k"},
      {"an invalid escape", json_doc("[]", "[]", "[]", "[]", "\"\\x\"")},
      {"a lone surrogate", json_doc("[]", "[]", "[]", "[]", "\"\\ud800\"")},
      {"a NUL byte in the document", std::string("{\"kind\":\"k\0\"}", 13)},
      // Missing fields.
      {"no kind", "{\"tensors\":[],\"integers\":[],\"reals\":[],\"strings\":[]}"},
      {"no tensors", "{\"kind\":\"k\",\"integers\":[],\"reals\":[],\"strings\":[]}"},
      {"no strings", "{\"kind\":\"k\",\"tensors\":[],\"integers\":[],\"reals\":[]}"},
      {"a tensor without data", json_doc("[{\"name\":\"t\",\"dtype\":\"float32\",\"shape\":[2]}]")},
      {"a tensor without dtype", json_doc("[{\"name\":\"t\",\"shape\":[2],\"data\":[1,2]}]")},
      {"a tensor without shape",
          json_doc("[{\"name\":\"t\",\"dtype\":\"float32\",\"data\":[1,2]}]")},
      {"a tensor without name", json_doc("[{\"dtype\":\"float32\",\"shape\":[2],\"data\":[1,2]}]")},
      {"an integer without value", json_doc("[]", "[{\"name\":\"i\"}]")},
      // Wrong types.
      {"a number as the kind", json_doc("[]", "[]", "[]", "[]", "5")},
      {"an object as the tensors", json_doc("{}")},
      {"a string as the tensors", json_doc("\"t\"")},
      {"a number as a tensor", json_doc("[5]")},
      {"a number as a tensor's name",
          json_doc("[" + json_tensor("[2]", "[1,2]", "\"float32\"", "5") + "]")},
      {"a string as a shape", json_doc("[" + json_tensor("\"[2]\"", "[1,2]") + "]")},
      {"an object as a shape", json_doc("[" + json_tensor("{\"a\":2}", "[1,2]") + "]")},
      {"a string in the data", json_doc("[" + json_tensor("[2]", "[1,\"2\"]") + "]")},
      {"null in the data", json_doc("[" + json_tensor("[2]", "[1,null]") + "]")},
      {"an array in the data", json_doc("[" + json_tensor("[2]", "[1,[2]]") + "]")},
      {"true in the data", json_doc("[" + json_tensor("[1]", "[true]") + "]")},
      {"a string as an integer", json_doc("[]", "[{\"name\":\"i\",\"value\":\"5\"}]")},
      {"a negative integer", json_doc("[]", "[{\"name\":\"i\",\"value\":-1}]")},
      {"a fractional integer", json_doc("[]", "[{\"name\":\"i\",\"value\":1.5}]")},
      {"an integer of 2^64", json_doc("[]", "[{\"name\":\"i\",\"value\":18446744073709551616}]")},
      {"an integer of 1e30", json_doc("[]", "[{\"name\":\"i\",\"value\":1e30}]")},
      {"a string as a real", json_doc("[]", "[]", "[{\"name\":\"r\",\"value\":\"0.1\"}]")},
      {"a real beyond the double range",
          json_doc("[]", "[]", "[{\"name\":\"r\",\"value\":1e400}]")},
      {"a number as a string's value",
          json_doc("[]", "[]", "[]", "[{\"name\":\"s\",\"value\":5}]")},
      // Shapes.
      {"a negative dim", json_doc("[" + json_tensor("[-2]", "[1,2]") + "]")},
      {"a fractional dim", json_doc("[" + json_tensor("[1.5]", "[1]") + "]")},
      {"a dim of 2e0", json_doc("[" + json_tensor("[2e0]", "[1,2]") + "]")},
      {"a dim of 2^64-1", json_doc("[" + json_tensor("[18446744073709551615]", "[1]") + "]")},
      {"a dim of 2^64", json_doc("[" + json_tensor("[18446744073709551616]", "[1]") + "]")},
      {"dims whose product overflows 64 bits",
          json_doc("[" + json_tensor("[4294967296,4294967296]", "[]") + "]")},
      {"dims whose product overflows 64 bits to 0",
          json_doc("[" + json_tensor("[65536,65536,65536,65536]", "[]") + "]")},
      {"a huge claimed shape with no data",
          json_doc("[" + json_tensor("[1000000000000]", "[]") + "]")},
      {"data shorter than the shape", json_doc("[" + json_tensor("[3]", "[1,2]") + "]")},
      {"data longer than the shape", json_doc("[" + json_tensor("[1]", "[1,2]") + "]")},
      {"data for a 0-dim tensor missing", json_doc("[" + json_tensor("[]", "[]") + "]")},
      {"nested data", json_doc("[" + json_tensor("[2,1]", "[[1],[2]]") + "]")},
      // Dtypes, names.
      {"an unknown dtype", json_doc("[" + json_tensor("[2]", "[1,2]", "\"int8\"") + "]")},
      {"an empty dtype", json_doc("[" + json_tensor("[2]", "[1,2]", "\"\"") + "]")},
      {"a dtype spelt as C++ spells it",
          json_doc("[" + json_tensor("[1]", "[1]", "\"bool_\"") + "]")},
      // int64 data are integers in int64's range; bool data are 0 or 1.
      {"a fraction in int64 data",
          json_doc("[" + json_tensor("[2]", "[1,2.5]", "\"int64\"") + "]")},
      {"an exponent in int64 data", json_doc("[" + json_tensor("[1]", "[1e3]", "\"int64\"") + "]")},
      {"2^63 in int64 data",
          json_doc("[" + json_tensor("[1]", "[9223372036854775808]", "\"int64\"") + "]")},
      {"a bool of 2", json_doc("[" + json_tensor("[2]", "[1,2]", "\"bool\"") + "]")},
      {"a bool of 1.0", json_doc("[" + json_tensor("[1]", "[1.0]", "\"bool\"") + "]")},
      {"a bool of -0", json_doc("[" + json_tensor("[1]", "[-0]", "\"bool\"") + "]")},
      {"a bool of 2 before the dtype",
          "{\"kind\":\"k\",\"tensors\":[{\"name\":\"t\",\"data\":[2],\"shape\":[1],"
          "\"dtype\":\"bool\"}],\"integers\":[],\"reals\":[],\"strings\":[]}"},
      {"two tensors of the same name", json_doc("[" + one + "," + one + "]")},
      {"a tensor with an empty name",
          json_doc("[" + json_tensor("[2]", "[1,2]", "\"float32\"", "\"\"") + "]")},
      {"two integers of the same name",
          json_doc("[]", "[{\"name\":\"i\",\"value\":1},{\"name\":\"i\",\"value\":2}]")},
      {"two strings of the same name",
          json_doc("[]", "[]", "[]",
              "[{\"name\":\"s\",\"value\":\"a\"},{\"name\":\"s\",\"value\":\"b\"}]")},
      // A version-1 reader takes exactly the fields of version 1 (a later version bumps the
      // number).
      {"an extra field", "{\"kind\":\"k\",\"comment\":\"hi\",\"tensors\":[" +
                             json_tensor("[2]", "[1,2]") +
                             "],\"integers\":[],\"reals\":[],\"strings\":[]}"},
      // Numbers rapidjson must refuse.
      {"a number beyond the double range in the data",
          json_doc("[" + json_tensor("[1]", "[1e309]", "\"float64\"") + "]")},
      {"a number with a huge positive exponent",
          json_doc("[" + json_tensor("[1]", "[1e999999999999]", "\"float64\"") + "]")},
      {"a bare minus", json_doc("[" + json_tensor("[1]", "[-]", "\"float64\"") + "]")},
      {"a hexadecimal number", json_doc("[" + json_tensor("[1]", "[0x10]", "\"float64\"") + "]")},
      {"a leading plus", json_doc("[" + json_tensor("[1]", "[+1]", "\"float64\"") + "]")},
  };
  for (const auto& [what, doc] : hostile) {
    INFO("JSON payload with " << what << ": " << doc.substr(0, 200)
                              << (doc.size() > 200 ? "…" : ""));
    const Outcome o = payload(doc, CheckpointFormat::json);
    INFO(o.message);
    CHECK(o.kind == Outcome::rejected);
    CHECK_THAT(o.message, Contains("damaged payload"));
  }
  CHECK_THROWS_WITH(
      parse_checkpoint_payload(deep_arrays, CheckpointFormat::json), Contains("nested too deeply"));
}

TEST_CASE("checkpoint JSON payload: harmless variations parse", "[checkpoint][damage][payload]") {
  // What a person editing the file by hand might do, and what other JSON writers produce.
  const std::vector<std::pair<std::string, std::string>> harmless = {
      {"no whitespace", json_doc("[" + json_tensor("[2]", "[1,2]") + "]")},
      {"fields in another order",
          "{\"strings\":[],\"reals\":[],\"integers\":[],\"tensors\":[{\"data\":[1,2],\"shape\":[2],"
          "\"dtype\":\"float32\","
          "\"name\":\"t\"}],\"kind\":\"k\"}"},
      {"integers written as 1.0e0 in the data",
          json_doc("[" + json_tensor("[2]", "[1.0e0,2]") + "]")},
      {"a trailing newline", json_doc("[" + json_tensor("[2]", "[1,2]") + "]") + "\n"},
      {"brackets in the kind string", json_doc("[" + json_tensor("[2]", "[1,2]") + "]", "[]", "[]",
                                          "[]", "\"" + std::string(16, '[') + "\"")},
  };
  for (const auto& [what, doc] : harmless) {
    INFO("JSON payload with " << what << ": " << doc);
    const Checkpoint c = parse_checkpoint_payload(doc, CheckpointFormat::json);
    CHECK(c.tensor("t").to_vector<double>() == std::vector<double>{1, 2});
    CHECK(c.tensor("t").dtype() == float32);
  }
  // int64 data before its dtype waits as text, and is then read as integers: 2^53 + 1 exactly.
  const Checkpoint early = parse_checkpoint_payload(
      "{\"kind\":\"k\",\"tensors\":[{\"name\":\"t\",\"data\":[-1,9007199254740993],"
      "\"shape\":[2],\"dtype\":\"int64\"}],\"integers\":[],\"reals\":[],\"strings\":[]}",
      CheckpointFormat::json);
  CHECK(early.tensor("t").dtype() == int64);
  CHECK(early.tensor("t").to_vector<int64_t>() == std::vector<int64_t>{-1, (int64_t{1} << 53) + 1});
}

TEST_CASE("checkpoint JSON payload: random documents parse plausibly or are rejected",
    "[checkpoint][damage][payload]") {
  std::mt19937_64 rng(11);
  const std::string alphabet = "{}[],:\"0123456789.-eE+ \\nul truefalsNaInfiy";
  const std::vector<std::string> tokens = {"{", "}", "[", "]", ",", ":", "\"name\"", "\"kind\"",
      "\"tensors\"", "\"shape\"", "\"data\"", "\"dtype\"", "\"float32\"", "\"float64\"",
      "\"integers\"", "\"reals\"", "\"strings\"", "\"value\"", "0", "1", "-1", "1e308", "1.5",
      "NaN", "Infinity", "null", "true", "\"t\""};
  const std::string valid = payload_of(serialize_checkpoint(sample(), CheckpointFormat::json));
  Failures failures;
  for (int k = 0; k < 3000; ++k) {
    std::string doc;
    switch (k % 3) {
      case 0:
        for (std::size_t n = rng() % 200; n > 0; --n) doc += alphabet[rng() % alphabet.size()];
        break;
      case 1:
        for (std::size_t n = rng() % 80; n > 0; --n) doc += tokens[rng() % tokens.size()];
        break;
      default:  // the valid document with a few tokens spliced in
        doc = valid;
        for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n)
          doc.insert(rng() % doc.size(), tokens[rng() % tokens.size()]);
    }
    judge_payload(payload(doc, CheckpointFormat::json), doc.size(),
        "random JSON payload '" + doc.substr(0, 300) + "'", failures);
  }
  CHECK_NO_FAILURES(failures);
}

// ---- problems found by these tests (see the report that came with them) -------------------------
//
// Each is its own test case so that a sanitizer abort in one does not hide the others.

TEST_CASE("strings with any bytes round-trip in binary — JSON refuses a NUL on both sides",
    "[checkpoint][damage][finding]") {
  Checkpoint c;
  c.kind = std::string("kind\0with NUL", 13);
  c.strings["nul"] = std::string("a\0b", 3);
  c.strings["bytes"] = "\xff\xfe\x80 not UTF-8";
  c.strings[std::string("name\0with NUL", 13)] = "v";
  {
    const Outcome o = file(serialize_checkpoint(c, CheckpointFormat::binary));
    INFO(o.message);
    REQUIRE(o.kind == Outcome::parsed);
    CHECK(difference(c, *o.checkpoint) == "");
  }
  // cereal's JSON reader stops a string at its first NUL, so JSON cannot carry one: the writer
  // says so instead of writing a file that would read back different ...
  CHECK_THROWS_WITH(serialize_checkpoint(c, CheckpointFormat::json),
      Contains("NUL") && Contains("binary format"));
  c.kind = "k";
  c.strings.erase(std::string("name\0with NUL", 13));
  c.strings.erase("nul");
  const Outcome o = file(serialize_checkpoint(c, CheckpointFormat::json));
  INFO(o.message);
  REQUIRE(o.kind == Outcome::parsed);
  CHECK(difference(c, *o.checkpoint) == "");
  // ... and the reader refuses a "\u0000" escape, which would otherwise let "float32\u0000x" read
  // as "float32", and make two different names "t\u0000a" and "t\u0000b" collide.
  for (const std::string& doc :
      {json_doc("[" + json_tensor("[2]", "[1,2]", "\"float32\\u0000x\"") + "]"),
          json_doc("[]",
              "[{\"name\":\"i\\u0000a\",\"value\":1},{\"name\":\"i\\u0000b\",\"value\":2}]")}) {
    INFO("JSON payload " << doc);
    const Outcome o = payload(doc, CheckpointFormat::json);
    INFO(o.message);
    CHECK(o.kind != Outcome::wrong);
    if (o.kind == Outcome::parsed) {
      CHECK(o.checkpoint->integers.size() != 1);  // the second integer must not vanish
      CHECK(o.checkpoint->tensors.empty());       // nor an unknown dtype pass as float32
    }
  }
}

TEST_CASE("a checkpoint with an empty tensor whose dim is larger than the file round-trips",
    "[checkpoint][damage][finding]") {
  Checkpoint c;
  c.kind = "k";
  c.tensors["kv_cache"] = zeros({0, 4096}, float32);
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    INFO("format " << format_name(format));
    const Outcome o = file(serialize_checkpoint(c, format));
    INFO(o.message);
    REQUIRE(o.kind == Outcome::parsed);
    CHECK(difference(c, *o.checkpoint) == "");
  }
}

TEST_CASE("what serialize_checkpoint writes parse_checkpoint reads (or it refuses to write)",
    "[checkpoint][damage][finding]") {
  // An entry with an empty name is written without complaint but refused when read back: a
  // checkpoint that saves fine and can never be loaded.
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    INFO("format " << format_name(format));
    Checkpoint c;
    c.kind = "k";
    c.integers[""] = 1;
    const Outcome written =
        attempt([&] { return parse_checkpoint(serialize_checkpoint(c, format)); });
    INFO(written.message);
    if (written.kind == Outcome::rejected)
      CHECK_THROWS_AS(serialize_checkpoint(c, format), CheckpointError);
  }
}

TEST_CASE("serializing an undefined tensor is a CheckpointError", "[checkpoint][damage][finding]") {
  Checkpoint c;
  c.kind = "k";
  c.tensors["missing_grad"] = Tensor();
  for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
    INFO("format " << format_name(format));
    CHECK_THROWS_AS(serialize_checkpoint(c, format), CheckpointError);
  }
}

TEST_CASE("checkpoint JSON: a float32 value beyond float's range is not silently infinite",
    "[checkpoint][damage][finding]") {
  const std::string doc = json_doc("[" + json_tensor("[2]", "[1e300,-1e39]") + "]");
  const Outcome o = payload(doc, CheckpointFormat::json);
  INFO(o.message);
  REQUIRE(o.kind != Outcome::wrong);
  if (o.kind == Outcome::parsed) {
    const std::vector<double> values = o.checkpoint->tensor("t").to_vector<double>();
    INFO("parsed as " << o.checkpoint->tensor("t").str());
    CHECK(std::isfinite(values[0]));
    CHECK(std::isfinite(values[1]));
  }
}

TEST_CASE("checkpoint JSON: numbers are read exactly as strtod reads them or refused",
    "[checkpoint][damage][finding]") {
  // rapidjson (Debian's 1.1.0, with cereal's kParseFullPrecisionFlag) misreads a zero significand
  // with an exponent, or with more than 22 zeros after the point ("0e100" -> -1.998e146,
  // "0.00000000000000000000000" -> -1.75e-192; passing 0 to clz: undefined behaviour), and
  // numbers just beyond DBL_MAX ("2e308" -> NaN, "9e308" -> -2.8e-308). A damaged or
  // hand-edited file must not load with such values.
  std::vector<std::string> numbers = {"0e300", "-0e300", "0e100", "0.0e300", "0e-300", "0e22",
      "0.000e5", "0.0000000000000000000000", "0.00000000000000000000000",
      "-0.00000000000000000000000000000000000000000000", "2e308", "1.8e308", "9e308",
      "3.7976931348623157e308", "1.7976931348623157e308", "1.7976931348623158e308", "1e308",
      "2.4e-324", "2.5e-324", "5e-324", "1e-400", "-1e300", "0.1",
      "123456789012345678901234567890"};
  // And random decimal numbers, heavy on zeros and nines, with exponents from -300 to +350 (below
  // -324 rapidjson can crash: the next test).
  std::mt19937_64 rng(3);
  auto digits = [&](std::size_t n, bool leading) {
    std::string d;
    for (std::size_t i = 0; i < n; ++i) {
      const uint64_t r = rng() % 4;
      d += r == 0 ? '0' : r == 1 ? '9' : static_cast<char>('0' + rng() % 10);
      if (leading && i == 0 && d[0] == '0') d[0] = '1';
    }
    return d;
  };
  for (int k = 0; k < 2000; ++k) {
    std::string n = rng() % 4 == 0 ? "-" : "";
    n += rng() % 3 == 0 ? "0" : digits(1 + rng() % 20, true);
    if (rng() % 2) n += "." + digits(1 + rng() % 20, false);
    if (rng() % 3) n += "e" + std::to_string(static_cast<int>(rng() % 651) - 300);
    numbers.push_back(n);
  }
  Failures failures;
  for (const std::string& number : numbers) {
    const double expected = std::strtod(number.c_str(), nullptr);  // glibc rounds correctly
    const Outcome o = payload(json_doc("[]", "[]", "[{\"name\":\"r\",\"value\":" + number + "}]"),
        CheckpointFormat::json);
    if (o.kind == Outcome::wrong) {
      failures.add(number + ": " + o.message);
    } else if (o.kind == Outcome::parsed) {
      const double got = o.checkpoint->real("r");
      if (std::bit_cast<uint64_t>(got) != std::bit_cast<uint64_t>(expected)) {
        std::ostringstream line;
        line.precision(17);
        line << number << " read as " << got << ", not " << expected;
        failures.add(line.str());
      }
    }
  }
  CHECK_NO_FAILURES(failures);
}

TEST_CASE("checkpoint JSON: a number far outside the double range does not crash the reader",
    "[checkpoint][damage][finding]") {
  // rapidjson's StrtodFullPrecision lets these through its range checks (they count the digits
  // or the written exponent, not where the decimal point is), and StrtodDiyFp then indexes its
  // table of 87 cached powers of ten with (dExp + 348) / 8 for a decimal exponent dExp below -348
  // or above 340: an out-of-bounds read — SIGSEGV in a Release build for the third number; under
  // UBSan "signed integer overflow ... GetCachedPower10" or "index 95 out of bounds for type
  // 'const uint64_t[87]'". Each should read as strtod reads it (0, a subnormal, inf) or be refused.
  const std::vector<std::string> numbers = {"12345678901234567e-341", "1.2345678901234567e-340",
      "1.23456789012345678e-340", "0.0000000000000000000000000000000000000001e-310",
      "1" + std::string(79, '2') + "e300",  // 1.2e379 (read as 4.5e41)
      "1" + std::string(200, '2') + "e300"};
  for (const std::string& number : numbers) {
    INFO(number);
    const Outcome o = payload(json_doc("[]", "[]", "[{\"name\":\"r\",\"value\":" + number + "}]"),
        CheckpointFormat::json);
    INFO(o.message);
    CHECK(o.kind != Outcome::wrong);
    if (o.kind == Outcome::parsed)
      CHECK(std::bit_cast<uint64_t>(o.checkpoint->real("r")) ==
            std::bit_cast<uint64_t>(std::strtod(number.c_str(), nullptr)));
  }
}

TEST_CASE("checkpoint JSON: a huge negative exponent is an error or a tiny number",
    "[checkpoint][damage][finding]") {
  // rapidjson computes exp + expFrac in int: -2147483639 - 10 overflows (undefined behaviour).
  const std::string doc =
      json_doc("[]", "[]", "[{\"name\":\"r\",\"value\":0.0000000001e-2147483639}]");
  const Outcome o = payload(doc, CheckpointFormat::json);
  INFO(o.message);
  REQUIRE(o.kind != Outcome::wrong);
  if (o.kind == Outcome::parsed) CHECK(o.checkpoint->real("r") == 0.0);
}

TEST_CASE("checkpoint binary: a zero-element tensor with huge other dims",
    "[checkpoint][damage][finding]") {
  // Every dim is no larger than the payload, and the tensor has no elements, but the strides
  // of shape [0, 100, …, 100] (10 × 100) overflow int64 in contiguous_strides, and numel()
  // overflows for [100, …, 100, 0].
  for (bool zero_first : {true, false}) {
    BinaryPayload p = binary_start(1).str("t").u8(0).u64(11);
    if (zero_first) p.u64(0);
    for (int i = 0; i < 10; ++i) p.u64(100);
    if (!zero_first) p.u64(0);
    const std::string bytes = binary_end(p);
    INFO("payload " << hex(bytes, 200));
    const Outcome o = payload(bytes, CheckpointFormat::binary);
    INFO(o.message);
    CHECK(o.kind != Outcome::wrong);
    if (o.kind == Outcome::parsed) CHECK(implausible(*o.checkpoint, bytes.size()) == "");
  }
}

TEST_CASE("checkpoint JSON: a zero-element tensor with huge other dims",
    "[checkpoint][damage][finding]") {
  for (const char* shape : {"[0,100,100,100,100,100,100,100,100,100,100]",
           "[100,100,100,100,100,100,100,100,100,100,0]"}) {
    const std::string doc = json_doc("[" + json_tensor(shape, "[]") + "]");
    INFO("payload " << doc);
    const Outcome o = payload(doc, CheckpointFormat::json);
    INFO(o.message);
    CHECK(o.kind != Outcome::wrong);
    if (o.kind == Outcome::parsed) CHECK(implausible(*o.checkpoint, doc.size()) == "");
  }
}

TEST_CASE(
    "a payload of many tiny tensors is refused before it holds more than a bounded multiple "
    "of its size",
    "[checkpoint][damage]") {
  // A binary payload written by hand: cereal's portable archive, little-endian, one-element
  // float32 tensors of 35 bytes each in the file and some 630 bytes each in memory (issue 35,
  // item 10: 2 million of them in an 86 MB file held 1.26 GB).
  const auto u64 = [](uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  const auto payload_of = [&](uint64_t tensors) {
    std::string p = "\x01" + u64(4) + "test" + u64(tensors);
    for (uint64_t i = 0; i < tensors; ++i) {
      char name[24];  // "t" and up to 20 digits
      std::snprintf(name, sizeof name, "t%06llu", static_cast<unsigned long long>(i));
      p += u64(7) + name + std::string(1, '\0') + u64(1) + u64(1) + std::string(4, '\0');
    }
    return p + u64(0) + u64(0) + u64(0);  // no integers, reals or strings
  };
  // 1 000 of them load: the 64 MiB of slack covers any real checkpoint's bookkeeping.
  CHECK(
      parse_checkpoint_payload(payload_of(1000), CheckpointFormat::binary).tensors.size() == 1000);
  // 300 000 (10.5 MB) would hold some 190 MB: refused once past 4 × 10.5 MB + 64 MiB.
  CHECK_THROWS_WITH(parse_checkpoint_payload(payload_of(300000), CheckpointFormat::binary, "p"),
      "checkpoint p: damaged payload: the tensors would hold more than 4 × the payload's size + "
      "64 MiB in memory");
}

namespace {
// The process's resident memory (VmRSS) or its peak (VmHWM), in bytes, from /proc/self/status.
uint64_t resident_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  FAIL("no " << field << " in /proc/self/status");
  return 0;
}
}  // namespace

TEST_CASE("checkpoint JSON: a payload is read within 4 × its size + 64 MiB, with no parse tree",
    "[checkpoint][damage]") {
  // One float32 tensor of 20 million zeros in a compact 40 MB payload: the tensor takes 80 MB;
  // cereal's JSON archive built a rapidjson tree of 16 bytes a value and more first (issue 35,
  // item 10: a 100 MB file of zeros held 1.9 GB).
  const uint64_t n = 20'000'000;
  std::string doc =
      "{\"kind\":\"k\",\"tensors\":[{\"name\":\"t\",\"dtype\":\"float32\",\"shape\":[" +
      std::to_string(n) + "],\"data\":[0";
  doc.reserve(doc.size() + 2 * n + 64);
  for (uint64_t i = 1; i < n; ++i) doc += ",0";
  doc += "]}],\"integers\":[],\"reals\":[],\"strings\":[]}";
  // Writing 5 to clear_refs resets the peak (VmHWM) to what is resident now (Linux 4.0 and on).
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.close();
    REQUIRE(clear.good());
  }
  const uint64_t before = resident_bytes("VmRSS");
  const Checkpoint c = parse_checkpoint_payload(doc, CheckpointFormat::json, "big");
  const uint64_t peak = resident_bytes("VmHWM");
  REQUIRE(c.tensor("t").numel() == static_cast<int64_t>(n));
  const uint64_t bound = 4 * doc.size() + (uint64_t{64} << 20);
  INFO("payload " << doc.size() << " bytes, peak above the start " << peak - before);
  CHECK(peak - before <= bound);
}
