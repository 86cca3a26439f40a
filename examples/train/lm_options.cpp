// ag-train's --task lm options: what they are (add_lm_options) and the values CLI11 cannot check by
// type alone (lm_options_problem); main.cpp adds them to the command line and checks them beside
// the other tasks' options, lm.cpp trains with them. docs/training.md, "--task lm", says what each
// does.
#include <cmath>
#include <string>

#include "nn/language_model.h"
#include "train.h"
#include "training/cli.h"

namespace ag_train {

using namespace ag;

namespace {
// Every option of --task lm alone, once: the other tasks refuse them.
constexpr const char* kLMOptionNames[] = {"--text", "--tokenizer", "--block-size", "--pre-norm",
    "--positions", "--learned-positions", "--rope-pairs", "--rope-base", "--kv-heads", "--norm",
    "--ffn", "--tie-weights", "--weight-decay", "--eval-windows", "--sample-length"};
}  // namespace

void add_lm_options(CLI::App& app, LMOptions& lm) {
  app.add_option("--text", lm.text,
      "--task lm: UTF-8 text files or folders to train on (default: Debian's fortunes)");
  app.add_option("--tokenizer", lm.tokenizer, "--task lm: char | word")->capture_default_str();
  training::add_whole_number(
      app, "--block-size", lm.block_size, "--task lm: context length in tokens");
  app.add_flag("--pre-norm", lm.pre_norm, "--task lm: GPT-2's pre-norm blocks (default: d2l's)");
  app.add_option("--positions", lm.positions,
         "--task lm: sinusoidal (d2l's) | learned (a trained table, nanoGPT's) | rope (rotary, "
         "Llama's) | alibi (a distance bias) | none (docs/text.md, \"Positions\")")
      ->capture_default_str();
  app.add_flag("--learned-positions", lm.learned_positions, "--task lm: --positions learned");
  app.add_option("--rope-pairs", lm.rope_pairs,
         "--task lm, --positions rope: which features turn together: interleaved (the paper's, "
         "Meta's Llama: 2j, 2j+1) | halves (GPT-NeoX's rotate_half: j, j + d/2)")
      ->capture_default_str();
  app.add_option("--rope-base", lm.rope_base, "--task lm, --positions rope: the angles' base θ")
      ->capture_default_str();
  training::add_whole_number(app, "--kv-heads", lm.kv_heads,
      "--task lm: key/value heads, dividing --heads (grouped-query attention; 1: multi-query; 0: "
      "as many as --heads)");
  app.add_option("--norm", lm.norm, "--task lm: layer (LayerNorm) | rms (RMSNorm, with --pre-norm)")
      ->capture_default_str();
  app.add_option("--ffn", lm.ffn, "--task lm: relu (d2l's FFN) | swiglu (Llama's)")
      ->capture_default_str();
  app.add_flag("--tie-weights,!--no-tie-weights", lm.tie_weights,
      "--task lm: the output layer reuses the token embedding (the default; --no-tie-weights: a "
      "separate Linear)");
  app.add_option("--weight-decay", lm.weight_decay, "--task lm: AdamW's weight decay")
      ->capture_default_str();
  training::add_whole_number(app, "--eval-windows", lm.eval_windows,
      "--task lm: validation windows of --block-size + 1 tokens per evaluation");
  training::add_whole_number(
      app, "--sample-length", lm.sample_length, "--task lm: tokens sampled at each evaluation");
}

std::string lm_options_problem(const CLI::App& app, Options& o) {
  const LMOptions& l = o.lm;
  if (o.task != "lm") {
    std::string given, all;
    for (const char* name : kLMOptionNames) {
      if (app.count(name) > 0) given += (given.empty() ? "" : ", ") + std::string(name);
      all += (all.empty() ? "" : ", ") + std::string(name);
    }
    if (given.empty()) return "";
    return given + ": for --task lm only (its options: " + all + ")";
  }
  if (l.learned_positions && app.count("--positions") && l.positions != "learned")
    return "--learned-positions and --positions " + l.positions + " disagree";
  if (l.learned_positions) o.lm.positions = "learned";
  if ((app.count("--rope-pairs") || app.count("--rope-base")) && l.positions != "rope")
    return "--rope-pairs and --rope-base are for --positions rope";
  if (l.tokenizer != "char" && l.tokenizer != "word")
    return "unknown --tokenizer '" + l.tokenizer + "' (known: char, word)";
  try {  // the names of the model's choices (nn/language_model.h's registries)
    (void)nn::parse_position_scheme(l.positions, "--positions");
    (void)nn::parse_rotary_pairs(l.rope_pairs, "--rope-pairs");
    (void)nn::parse_normalization(l.norm, "--norm");
    (void)nn::parse_feed_forward(l.ffn, "--ffn");
  } catch (const ValueError& e) {
    return e.what();
  }
  if (l.block_size < 1 || l.eval_windows < 1 || l.sample_length < 0 || !(l.weight_decay >= 0) ||
      !std::isfinite(l.weight_decay))
    return "--block-size and --eval-windows must be positive, --sample-length and "
           "--weight-decay not negative";
  if (l.sample_length > 100000)
    return "--sample-length " + std::to_string(l.sample_length) + " is above 100000";
  return "";
}

}  // namespace ag_train
