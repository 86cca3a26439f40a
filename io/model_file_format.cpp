#include "io/model_file_format.h"

#include <charconv>
#include <cstdio>
#include <map>

namespace ag {

bool is_safetensors_path(const std::string& path) { return path.ends_with(".safetensors"); }

namespace {

// A metadata value read as a T, all of it; otherwise a CheckpointError saying it is not `what`.
template <class T>
T parse_metadata(
    const std::string& path, const std::string& name, const std::string& value, const char* what) {
  T parsed{};
  const char* end = value.data() + value.size();
  const auto [stop, error] = std::from_chars(value.data(), end, parsed);
  if (error != std::errc() || stop != end || value.empty())
    throw CheckpointError(
        "model file " + path + ": __metadata__ " + name + " = \"" + value + "\" is not " + what);
  return parsed;
}

// A safetensors file's metadata as typed entries and its tensors under "model.".
Checkpoint entries_of(const Safetensors& file, const std::string& path,
    const std::set<std::string>& integer_names, const std::set<std::string>& real_names,
    const std::set<std::string>& string_names) {
  Checkpoint c;
  c.kind = "model";
  for (const auto& [name, value] : file.metadata) {
    if (string_names.count(name))
      c.strings[name] = value;
    else if (real_names.count(name))
      c.reals[name] = parse_metadata<double>(path, name, value, "a number");
    else if (integer_names.count(name))
      c.integers[name] = parse_metadata<uint64_t>(path, name, value, "a whole number");
  }
  for (const auto& [name, tensor] : file.tensors) c.tensors["model." + name] = tensor;
  return c;
}

}  // namespace

namespace {

// Either format, read by the two given ways (from a path, or from bytes in memory): ag's checkpoint
// as it is; a safetensors file with its metadata typed, its errors those of a model file.
template <class ReadCheckpoint, class ReadSafetensors>
ModelFile model_file(const std::string& source, const ReadCheckpoint& read_checkpoint,
    const ReadSafetensors& read_safetensors_file, const std::set<std::string>& integer_names,
    const std::set<std::string>& real_names, const std::set<std::string>& string_names) {
  ModelFile file;
  if (!is_safetensors_path(source)) {
    file.entries = read_checkpoint();
    return file;
  }
  try {
    file.safetensors = read_safetensors_file();
  } catch (const IoError& e) {
    throw CheckpointError(e.what());  // a model file's error type, whatever its format
  }
  file.entries = entries_of(*file.safetensors, source, integer_names, real_names, string_names);
  return file;
}

}  // namespace

ModelFile read_model_file(const std::string& path, const std::set<std::string>& integer_names,
    const std::set<std::string>& real_names, const std::set<std::string>& string_names) {
  return model_file(
      path, [&] { return load_checkpoint(path); }, [&] { return read_safetensors(path); },
      integer_names, real_names, string_names);
}

ModelFile parse_model_file(std::string_view bytes, const std::string& source,
    const std::set<std::string>& integer_names, const std::set<std::string>& real_names,
    const std::set<std::string>& string_names) {
  return model_file(
      source, [&] { return parse_checkpoint(bytes, source); },
      [&] { return parse_safetensors(bytes, source); }, integer_names, real_names, string_names);
}

void load_model_weights(nn::Module& model, const ModelFile& file, const std::string& path) {
  check_finite(file.entries.tensors_under("model"), "model file " + path);
  if (file.safetensors)
    load_safetensors(model, *file.safetensors, path);
  else
    model.load_state_dict(file.entries.tensors_under("model"));
}

SaveResult save_model_file(const std::string& path, const nn::Module& model, Checkpoint settings,
    CheckpointFormat format) {
  settings.kind = "model";
  if (is_safetensors_path(path)) {
    ModuleFileOptions options;
    options.metadata = {{"format", "pt"}};
    for (const auto& [name, value] : settings.strings) options.metadata[name] = value;
    for (const auto& [name, value] : settings.integers)
      options.metadata[name] = std::to_string(value);
    for (const auto& [name, value] : settings.reals) {
      char text[32];
      std::snprintf(text, sizeof text, "%.17g", value);
      options.metadata[name] = text;
    }
    try {
      return save_safetensors(model, path, options);
    } catch (const CheckpointError&) {
      throw;
    } catch (const IoError& e) {
      throw CheckpointError(e.what());  // a model file's error type, whatever its format
    }
  }
  for (const auto& [name, t] : model.state_dict()) settings.tensors["model." + name] = t;
  return save_checkpoint(settings, path, {format, {}});
}

}  // namespace ag
