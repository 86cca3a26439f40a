// A run's checkpoint, described once: one function names every entry with its type, and the same
// function writes the entries into a Checkpoint and reads them back (the way cereal's serialize()
// and nanoGPT's one checkpoint dict work), so that what is saved and what is restored cannot
// drift apart.
//
//   void describe(training::Layout& file, MyOptions& o) {
//     file.count("config.steps", o.steps, 1);        // written as it is; read back checked >= 1
//     file.real("config.lr", o.lr);
//     file.text("config.schedule", o.schedule);
//   }
//   describe(training::Layout::writer(checkpoint), o);            // save
//   describe(training::Layout::reader(checkpoint, path), o);      // --resume
//
// Every value read is checked before it is used: a count outside its range, a missing entry or
// one of the wrong type is a CheckpointError naming the file and the key — a damaged or crafted
// file never becomes a step counter of 2^63 or a loop that does not end.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "autograd/generator.h"
#include "io/checkpoint.h"

namespace ag::training {

class Layout {
 public:
  // Entries are added to `checkpoint`.
  static Layout writer(Checkpoint& checkpoint);
  // Entries are read from `checkpoint`, the file at `path` (named in errors).
  static Layout reader(const Checkpoint& checkpoint, const std::string& path);

  bool reading() const { return in_ != nullptr; }
  const std::string& path() const { return path_; }

  // A count or size (steps, a batch, a position): read back within [min, max].
  void count(const std::string& key, int64_t& value, int64_t min = 0,
      int64_t max = std::numeric_limits<int64_t>::max());
  void count(const std::string& key, int& value, int min, int max);
  // A whole number used as it is (a seed, a CRC).
  void integer(const std::string& key, uint64_t& value);
  void integer(const std::string& key, uint32_t& value);
  // A real number (a learning rate); read back finite and >= min.
  void real(
      const std::string& key, double& value, double min = -std::numeric_limits<double>::infinity());
  void text(const std::string& key, std::string& value);
  // A text that must be one of `choices` ("constant|cosine|noam").
  void choice(const std::string& key, std::string& value, const std::string& choices);

  // Entries only some runs have: not written while the value is `absent`; a file without the
  // entry reads as `absent` (so that files written before the entry existed still load).
  void count_unless(const std::string& key, int64_t& value, int64_t absent);
  void choice_unless(const std::string& key, std::string& value, const std::string& choices,
      const std::string& absent);

  // A random generator's position: "<name>.seed" and "<name>.offset".
  void generator(const std::string& name, GeneratorState& state);
  void generator(const std::string& name, Generator& generator);  // its state, saved or restored

  // The underlying file, for the entries that models/ describes itself (a model's configuration
  // and vocabularies: models/seq2seq_file.h, models/lm_file.h).
  Checkpoint& out() { return *out_; }
  const Checkpoint& in() const { return *in_; }

  [[noreturn]] void refuse(const std::string& key, const std::string& why) const;

 private:
  Layout(Checkpoint* out, const Checkpoint* in, std::string path)
      : out_(out), in_(in), path_(std::move(path)) {}
  Checkpoint* out_;
  const Checkpoint* in_;
  std::string path_;
};

}  // namespace ag::training
