// Checkpoint files: named tensors and named scalars, saved atomically, checked before they are
// read.
//
// A Checkpoint is a plain container — like the dict torch.save writes — that a training program
// fills: nn::Module::state_dict() gives the parameters and buffers ("model.…"), an optimizer's
// state_dict() its moments and step counts (io/optimizer_state.h turns it into "optimizer.…"
// entries), and the program adds its step, generator states and configuration. This file knows
// nothing of modules or optimizers; it only stores and checks. The engine (ag::autograd) knows
// nothing of this file: persistence is ag::io's, which sits above nn and optim.
//
// On disk a checkpoint is a 28-byte header followed by a cereal archive (portable binary, or JSON
// for reading by eye):
//
//   bytes 0–7    magic  89 41 47 43 0D 0A 1A 0A  ("\x89AGC\r\n\x1a\n", in the manner of PNG: it
//                catches files of another kind and newline or 7-bit mangling)
//   bytes 8–11   format version (little-endian u32), currently 1
//   bytes 12–15  encoding: 0 portable binary, 1 JSON
//   bytes 16–23  payload length in bytes (u64); must equal the file's size − 28
//   bytes 24–27  CRC-32 (zlib) of bytes 8–23 followed by the payload
//
// Reading checks all of that before cereal parses a byte of the payload, and the parser itself
// never trusts a length: every count is checked against the bytes that remain, so a damaged or
// hostile file can neither crash the reader nor make it allocate more than the file warrants (the
// file's size for the binary encoding; JSON's parse tree takes a bounded multiple of it). Numbers
// in JSON are converted by std::from_chars, not by rapidjson, whose own conversion misreads or
// overreads some inputs. What the reader refuses, the writer refuses to write.
// Writing goes to a temporary file in the same folder, is flushed and fsync'ed, and then renamed
// over the target, so the target is always either the old complete file or the new one. The
// temporary files of saves that were killed before their rename are removed by the next save to
// the same path (remove_stale_temp_files).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/tensor.h"
#include "io/file.h"

namespace ag {

// Any problem with a checkpoint file or with fitting its contents to a model or optimizer.
class CheckpointError : public IoError {
 public:
  using IoError::IoError;
};

enum class CheckpointFormat { binary, json };

struct Checkpoint {
  std::string kind;                          // what wrote it: "ag-train", "model", …
  std::map<std::string, Tensor> tensors;     // contiguous copies, by dotted name
  std::map<std::string, uint64_t> integers;  // step counts, generator states, sizes
  std::map<std::string, double> reals;       // learning rates, hyper-parameters
  std::map<std::string, std::string> strings;

  // The entry of that name, or a CheckpointError naming the key and the file's kind.
  const Tensor& tensor(const std::string& name) const;
  uint64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  const std::string& string(const std::string& name) const;

  // The entries whose name starts with prefix + ".", with the prefix removed (a sub-dictionary:
  // checkpoint.tensors_under("model") gives the model's state).
  std::map<std::string, Tensor> tensors_under(const std::string& prefix) const;
};

// The points of a save at which a test may stop the process (see SaveOptions::on_phase).
using SavePhase = WritePhase;

struct SaveOptions {
  CheckpointFormat format = CheckpointFormat::binary;
  // Called as the save passes each phase; tests kill the process here to check atomicity.
  std::function<void(SavePhase)> on_phase;
};

// What a save did besides writing the file: the stale temporary files it removed (io/file.h).
using SaveResult = WriteResult;

// Writes `checkpoint` to `path` atomically (write_file_atomically, io/file.h), after removing the
// stale temporary files of earlier saves to `path`. Throws CheckpointError on any I/O failure,
// leaving whatever was at `path` untouched.
SaveResult save_checkpoint(
    const Checkpoint& checkpoint, const std::string& path, const SaveOptions& options = {});
// Reads and checks a whole file. Throws CheckpointError for a missing, truncated, corrupted or
// foreign file, with a message saying which.
Checkpoint load_checkpoint(const std::string& path);

// The complete file contents, and the reverse — for tests and the fuzzer.
std::string serialize_checkpoint(const Checkpoint& checkpoint, CheckpointFormat format);
Checkpoint parse_checkpoint(std::string_view file_bytes, const std::string& source = "<memory>");
// The payload alone (no header, no CRC) — lets the fuzzer reach the parser past the checksum.
Checkpoint parse_checkpoint_payload(
    std::string_view payload, CheckpointFormat format, const std::string& source = "<memory>");

uint32_t crc32(std::string_view bytes);

// Every element of every tensor finite (no NaN, no ±Inf), or a CheckpointError naming `file`, the
// tensor and the element: "model file m.agm: tensor encoder.blks.0.ffn.dense1.weight holds nan
// (element 17 of 4096)". A CRC tells a damaged file; this tells weights that were saved broken
// (a run that diverged), which would otherwise load and produce nothing but NaN.
void check_finite(const std::map<std::string, Tensor>& tensors, const std::string& file);

}  // namespace ag
