#include "autograd/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/string.hpp>
#include <cstring>
#include <fstream>
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
  for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}

const char* dtype_tag(DType dtype) { return dtype == float32 ? "float32" : "float64"; }

// ---- the binary payload (cereal's portable binary archive) ---------------------------------------

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

// Appends a dim read from the file to `shape` and updates `numel`; a dim larger than the payload
// is damage (no tensor can hold more elements than the file has bytes), and the product saturates
// just above the payload size instead of overflowing.
void add_dim(Shape& shape, uint64_t& numel, uint64_t size, std::size_t payload_size, const std::string& tensor,
             const std::string& source) {
  if (size > payload_size) fail(source, "damaged payload: tensor '" + tensor + "' has a dim of size " + std::to_string(size));
  numel = size == 0 ? 0 : (numel > payload_size / size ? payload_size + 1 : numel * size);
  shape.push_back(static_cast<int64_t>(size));
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

uint64_t read_count(cereal::PortableBinaryInputArchive& ar, Budget& budget, uint64_t min_bytes_each, const char* what) {
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
        if (data.numel() > 0) ar(cereal::binary_data(data.data<T>(), static_cast<std::size_t>(data.numel()) * sizeof(T)));
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
  if (!map.emplace(name, std::move(value)).second) fail(source, "damaged payload: entry '" + name + "' appears twice");
}

Checkpoint read_binary(std::string_view payload, const std::string& source) {
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
    if (dtype_code > 1) fail(source, "damaged payload: tensor '" + name + "' has an unknown dtype code");
    const DType dtype = dtype_code == 0 ? float32 : float64;
    const uint64_t ndim = read_count(ar, budget, 8, "a tensor's dims");
    Shape shape;
    uint64_t numel = 1;
    for (uint64_t d = 0; d < ndim; ++d) {
      uint64_t size = 0;
      ar(size);
      add_dim(shape, numel, size, payload.size(), name, source);
    }
    budget.charge(numel, dtype_size(dtype), "a tensor's data");
    Tensor t = empty(shape, dtype);
    dispatch(dtype, [&]<typename T>() {
      if (numel > 0) ar(cereal::binary_data(t.data<T>(), static_cast<std::size_t>(numel) * sizeof(T)));
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
  if (in.peek() != std::char_traits<char>::eof()) fail(source, "damaged payload: bytes after the end of the data");
  return c;
}

// ---- the JSON payload (cereal's JSON archive) ----------------------------------------------------

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
      for (double v : t.detach().to_vector<double>()) ar(v);  // a float32 value is exact as a double
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
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
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

Checkpoint read_json(std::string_view payload, const std::string& source) {
  if (json_depth(payload) > kMaxJsonDepth) fail(source, "damaged payload: JSON nested too deeply");
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
    Shape shape;
    uint64_t numel = 1;
    for (cereal::size_type d = 0; d < ndim; ++d) {
      uint64_t size = 0;
      ar(size);
      add_dim(shape, numel, size, payload.size(), name, source);
    }
    ar.finishNode();
    ar.setNextName("data");
    ar.startNode();
    cereal::size_type values = 0;
    ar.loadSize(values);
    if (values != numel)
      fail(source, "damaged payload: tensor '" + name + "' of shape " + shape_str(shape) + " has " +
                       std::to_string(values) + " values");
    budget.charge(numel, 1, "a tensor's data");
    Tensor t = empty(shape, dtype);
    dispatch(dtype, [&]<typename T>() {
      T* p = t.data<T>();
      for (uint64_t e = 0; e < numel; ++e) {
        double v = 0;
        ar(v);
        p[e] = static_cast<T>(v);
      }
    });
    ar.finishNode();
    ar.finishNode();
    insert_unique(c.tensors, std::move(name), t, source);
  }
  ar.finishNode();
  auto read_list = [&](const char* list, auto& map) {
    ar.setNextName(list);
    ar.startNode();
    cereal::size_type n = 0;
    ar.loadSize(n);
    budget.charge(n, 2, list);
    for (cereal::size_type i = 0; i < n; ++i) {
      ar.startNode();
      std::string name;
      typename std::remove_reference_t<decltype(map)>::mapped_type value{};
      ar(cereal::make_nvp("name", name));
      ar(cereal::make_nvp("value", value));
      ar.finishNode();
      insert_unique(map, std::move(name), std::move(value), source);
    }
    ar.finishNode();
  };
  read_list("integers", c.integers);
  read_list("reals", c.reals);
  read_list("strings", c.strings);
  return c;
}

}  // namespace

// ---- Checkpoint accessors ---------------------------------------------------------------------------

namespace {
template <class Map>
const typename Map::mapped_type& lookup(const Map& map, const std::string& name, const char* what, const std::string& kind) {
  auto it = map.find(name);
  if (it == map.end()) throw CheckpointError("checkpoint (" + kind + "): no " + what + " named '" + name + "'");
  return it->second;
}
}  // namespace

const Tensor& Checkpoint::tensor(const std::string& name) const { return lookup(tensors, name, "tensor", kind); }
uint64_t Checkpoint::integer(const std::string& name) const { return lookup(integers, name, "integer", kind); }
double Checkpoint::real(const std::string& name) const { return lookup(reals, name, "real", kind); }
const std::string& Checkpoint::string(const std::string& name) const { return lookup(strings, name, "string", kind); }

std::map<std::string, Tensor> Checkpoint::tensors_under(const std::string& prefix) const {
  std::map<std::string, Tensor> out;
  const std::string start = prefix + ".";
  for (auto it = tensors.lower_bound(start); it != tensors.end() && it->first.rfind(start, 0) == 0; ++it)
    out.emplace(it->first.substr(start.size()), it->second);
  return out;
}

// ---- files ----------------------------------------------------------------------------------------

uint32_t crc32(std::string_view bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t left = bytes.size();
  while (left > 0) {  // zlib takes 32-bit lengths
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
    crc = ::crc32(crc, p, chunk);
    p += chunk;
    left -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string serialize_checkpoint(const Checkpoint& checkpoint, CheckpointFormat format) {
  std::string payload;
  try {
    payload = format == CheckpointFormat::binary ? write_binary(checkpoint) : write_json(checkpoint);
  } catch (const cereal::Exception& e) {
    throw CheckpointError(std::string("checkpoint: cannot encode: ") + e.what());
  }
  std::string file(kMagic, sizeof kMagic);
  put_u32(file, kFormatVersion);
  put_u32(file, format == CheckpointFormat::binary ? 0 : 1);
  put_u64(file, payload.size());
  put_u32(file, crc32(payload));
  return file + payload;
}

Checkpoint parse_checkpoint_payload(std::string_view payload, CheckpointFormat format, const std::string& source) {
  try {
    return format == CheckpointFormat::binary ? read_binary(payload, source) : read_json(payload, source);
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
    fail(source, "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the 28-byte header");
  const uint64_t version = get_le(bytes, 8, 4);
  if (version != kFormatVersion)
    fail(source, "format version " + std::to_string(version) + " is not supported (this ag reads version " +
                     std::to_string(kFormatVersion) + ")");
  const uint64_t encoding = get_le(bytes, 12, 4);
  if (encoding > 1) fail(source, "unknown payload encoding " + std::to_string(encoding));
  const uint64_t length = get_le(bytes, 16, 8);
  const uint64_t present = bytes.size() - kHeaderSize;
  if (length != present)
    fail(source, (present < length ? "truncated: the header announces " : "damaged: the header announces ") +
                     std::to_string(length) + " payload bytes, the file holds " + std::to_string(present));
  const std::string_view payload = bytes.substr(kHeaderSize);
  if (crc32(payload) != static_cast<uint32_t>(get_le(bytes, 24, 4)))
    fail(source, "damaged: the CRC-32 of the payload does not match the header");
  return parse_checkpoint_payload(payload, encoding == 0 ? CheckpointFormat::binary : CheckpointFormat::json, source);
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) fail(path, "read error");
  return parse_checkpoint(bytes.str(), path);
}

namespace {
// Writes all of [data, data + size) to fd, retrying short writes.
void write_all(int fd, const char* data, std::size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path, std::string("write failed: ") + std::strerror(errno));
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}
std::atomic<uint64_t> temp_counter{0};
}  // namespace

void save_checkpoint(const Checkpoint& checkpoint, const std::string& path, const SaveOptions& options) {
  const std::string bytes = serialize_checkpoint(checkpoint, options.format);
  auto phase = [&](SavePhase p) {
    if (options.on_phase) options.on_phase(p);
  };
  // The temporary file lives in the target's folder, so rename() is atomic (same filesystem).
  const std::string temp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(temp_counter++);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create the temporary file " + temp + ": " + std::strerror(errno));
  try {
    phase(SavePhase::temp_file_opened);
    const std::size_t half = bytes.size() / 2;
    write_all(fd, bytes.data(), half, path);
    phase(SavePhase::half_written);
    write_all(fd, bytes.data() + half, bytes.size() - half, path);
    phase(SavePhase::written);
    if (::fsync(fd) != 0) fail(path, std::string("fsync failed: ") + std::strerror(errno));
    phase(SavePhase::synced);
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    fail(path, std::string("close failed: ") + std::strerror(errno));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail(path, std::string("rename failed: ") + std::strerror(error));
  }
  // Make the rename itself durable: fsync the folder that holds the new name.
  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  phase(SavePhase::renamed);
}

}  // namespace ag
