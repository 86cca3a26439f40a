// Whole-file reads and atomic writes, shared by the file formats of io/ (internal).
#pragma once

#include <string>
#include <string_view>

namespace ag::io::detail {

// The bytes of the regular file at `path`; an IoError naming `what` ("safetensors", "npy"), the
// path and the system's reason otherwise (missing, a folder, unreadable).
std::string read_whole_file(const std::string& path, const std::string& what);

// Writes `bytes` to `path` so that the file appears whole or not at all: a temporary file in the
// same folder, fsync, rename over `path`, fsync of the folder. A failure leaves `path` as it was.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace ag::io::detail
