// ag-train's options and its three tasks, each a file of its own over ag::training:
//   toy.cpp        the toy tasks (copy, reverse, sort, add): d2l's Transformer learning them
//   translate.cpp  --task translate: d2l's machine translation on sentence pairs
//   lm.cpp         --task lm: a decoder-only language model on text (its options: lm_options.cpp)
// main.cpp reads the command line and picks one.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/seq2seq.h"
#include "training/layout.h"
#include "training/run.h"

namespace ag_train {

// --task lm's own options (docs/training.md, "--task lm").
struct LMOptions {
  std::vector<std::string> text;  // files or folders; none: Debian's fortunes
  std::string tokenizer = "char";
  int64_t block_size = 64;
  bool pre_norm = false;
  // Where the positions are (nn::PositionScheme): sinusoidal | learned | rope | alibi | none.
  std::string positions = "sinusoidal";
  bool learned_positions = false;          // --learned-positions: --positions learned (main.cpp)
  std::string rope_pairs = "interleaved";  // rope: interleaved | halves
  double rope_base = 10000.0;              // rope
  int64_t kv_heads = 0;                    // key/value heads, 0: as many as --heads
  std::string norm = "layer";              // layer | rms (with --pre-norm)
  std::string ffn = "relu";                // relu | swiglu
  // On by default: it also scales the embedding so that the positions are not drowned
  // (nn/language_model.h; docs/training.md, "--task lm").
  bool tie_weights = true;
  double weight_decay = 0.1;
  int64_t eval_windows = 100;  // validation windows of block_size + 1 tokens per evaluation
  int64_t sample_length = 200;
};

struct Options {
  ag::training::RunOptions run;  // --steps, --lr, --checkpoint, --resume, … (training/run.h)
  std::string task = "reverse";
  ag::seq2seq::ModelConfig model;  // the encoder–decoder's sizes (the toy tasks and translate)
  // normal | scaled: the token embeddings' initialisation (toy.cpp, scale_embedding_init); the
  // add task's default is scaled.
  std::string embedding_init = "normal";
  int64_t eval_size = 500;  // held-out sequences (saved with the run)
  int64_t show = 4;         // decoded examples printed at each evaluation
  std::string save_model;
  std::string curves_dir;     // training_curves.csv (a row per evaluation) and training_curves.png
  std::string attention_png;  // at the end: the attention weights of one decoded held-out example
  int64_t attention_example = -1;  // -1: the first held-out example of the longest source
  // --task translate (d2l's machine translation; the defaults: translate_defaults in main.cpp).
  std::string pairs;                // d2l's fra.txt format; "": the generated corpus
  int64_t generated_pairs = 20000;  // pairs of the generated corpus (data/synthetic_pairs.h)
  std::string write_pairs;          // write the generated corpus to this file, and stop
  int64_t num_steps = 10, min_freq = 2;
  int64_t beam = 4;  // the beam width of the evaluation (0: greedy only)
  LMOptions lm;
  std::set<std::string> given;  // the options the command line gave (main.cpp)
};

// --resume: the checkpoint, its settings read into `o` by `describe` (the task's); an option given
// on the command line that defines the run must agree with the file's, or the run is refused
// (UsageError naming both values): a resumed run is the run it was, and an option that would not
// take effect is not silently dropped. Nothing without --resume.
std::optional<ag::Checkpoint> resume(
    Options& o, const std::function<void(ag::training::Layout&)>& describe);

// The entries every ag-train run's checkpoint has besides the shared ones (training::describe):
// config.eval_size, and config.embedding_init when it is not d2l's "normal".
void describe_common(ag::training::Layout& file, Options& o);

// Why the toy task's run cannot start ("" if it can): the held-out set and the run's memory.
std::string toy_size_problem(const Options& o);

// --task lm's options on the command line, and "" or what is wrong with their values: another
// task given one of them, or a value CLI11 cannot check by type alone; --learned-positions
// becomes --positions learned here (lm_options.cpp).
void add_lm_options(CLI::App& app, LMOptions& lm);
std::string lm_options_problem(const CLI::App& app, Options& o);

int train_toy(Options o);        // toy.cpp
int train_translate(Options o);  // translate.cpp
int train_lm(Options o);         // lm.cpp

}  // namespace ag_train
