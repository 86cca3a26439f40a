// ag-train — trains a d2l Transformer on a toy sequence task and shows it learning; or d2l's
// translator on sentence pairs (--task translate), or a language model on text (--task lm).
//
//   ag-train                                   # reverse, the default model: ~100% exact sequences
//   ag-train --task sort --steps 4000
//   ag-train --task translate [--pairs fra.txt]   # BLEU of greedy and beam search (docs/text.md)
//   ag-train --task lm [--text FILE...]        # Debian's fortunes by default; then ag-generate
//   ag-train --checkpoint run.agc              # saves each --checkpoint-every steps and at the end
//   ag-train --resume run.agc                  # continues exactly where run.agc stopped
//   ag-train --save-model reverse.agm          # a model-only file for ag-predict
//   ag-train --curves-dir out                  # out/training_curves.csv and .png (gnuplot)
//   ag-train --attention-png attention.png     # attention heatmaps of a decoded held-out example
//   mpirun -np 2 ag-train                      # data-parallel on 2 processes (docs/distributed.md)
//   ag-train --help
//
// This file reads the command line and picks the task; each task is a file of its own (toy.cpp,
// translate.cpp, lm.cpp) whose loop runs on ag::training (training/): the run's checkpoint and
// resume, the data-parallel step, the report, Ctrl-C (which stops after the current step and,
// with --checkpoint, saves first).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "data/synthetic_pairs.h"
#include "data/toy_tasks.h"
#include "distributed/distributed.h"
#include "io/file.h"
#include "io/output_path.h"
#include "models/memory_budget.h"
#include "models/seq2seq_memory.h"
#include "models/seq2seq_translation.h"
#include "train.h"
#include "training/cli.h"
#include "viz/curves.h"

namespace ag_train {

using namespace ag;

void describe_common(training::Layout& file, Options& o) {
  training::describe(file, o.run);
  file.count("config.eval_size", o.eval_size, 1);
  // Only a run that did not start as d2l's has it (add's default): the other runs' checkpoints
  // stay as they were, and a file without it began "normal".
  file.choice_unless("config.embedding_init", o.embedding_init, "normal|scaled", "normal");
}

namespace {

// The options that define a run, each as its value reads (to compare the command line's with a
// resumed checkpoint's).
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}
std::string flag(bool on) { return on ? "on" : "off"; }
using Setting = std::pair<const char*, std::function<std::string(const Options&)>>;
const std::vector<Setting>& run_defining_options() {
  static const std::vector<Setting> settings = {
      {"--steps", [](const Options& o) { return std::to_string(o.run.steps); }},
      {"--batch-size", [](const Options& o) { return std::to_string(o.run.batch_size); }},
      {"--lr", [](const Options& o) { return number(o.run.lr); }},
      {"--clip", [](const Options& o) { return number(o.run.clip); }},
      {"--schedule", [](const Options& o) { return o.run.schedule; }},
      {"--warmup", [](const Options& o) { return std::to_string(o.run.warmup); }},
      {"--seed", [](const Options& o) { return std::to_string(o.run.seed); }},
      {"--chunk-rows", [](const Options& o) { return std::to_string(o.run.chunk_rows); }},
      {"--eval-size", [](const Options& o) { return std::to_string(o.eval_size); }},
      {"--embedding-init", [](const Options& o) { return o.embedding_init; }},
      {"--num-hiddens", [](const Options& o) { return std::to_string(o.model.num_hiddens); }},
      {"--ffn-num-hiddens",
          [](const Options& o) { return std::to_string(o.model.ffn_num_hiddens); }},
      {"--heads", [](const Options& o) { return std::to_string(o.model.num_heads); }},
      {"--layers", [](const Options& o) { return std::to_string(o.model.num_layers); }},
      {"--dropout", [](const Options& o) { return number(o.model.dropout); }},
      {"--pairs", [](const Options& o) { return o.pairs; }},
      {"--generated-pairs", [](const Options& o) { return std::to_string(o.generated_pairs); }},
      {"--min-freq", [](const Options& o) { return std::to_string(o.min_freq); }},
      {"--num-steps", [](const Options& o) { return std::to_string(o.num_steps); }},
      {"--text",
          [](const Options& o) {
            std::string files;  // the first two, and how many
            for (std::size_t i = 0; i < o.lm.text.size() && i < 2; ++i)
              files += (i == 0 ? "" : " ") + o.lm.text[i];
            if (o.lm.text.size() > 2)
              files += " … (" + std::to_string(o.lm.text.size()) + " files)";
            return files;
          }},
      {"--tokenizer", [](const Options& o) { return o.lm.tokenizer; }},
      {"--block-size", [](const Options& o) { return std::to_string(o.lm.block_size); }},
      {"--pre-norm", [](const Options& o) { return flag(o.lm.pre_norm); }},
      {"--positions", [](const Options& o) { return o.lm.positions; }},
      {"--rope-pairs", [](const Options& o) { return o.lm.rope_pairs; }},
      {"--rope-base", [](const Options& o) { return number(o.lm.rope_base); }},
      {"--kv-heads", [](const Options& o) { return std::to_string(o.lm.kv_heads); }},
      {"--norm", [](const Options& o) { return o.lm.norm; }},
      {"--ffn", [](const Options& o) { return o.lm.ffn; }},
      {"--tie-weights", [](const Options& o) { return flag(o.lm.tie_weights); }},
      {"--weight-decay", [](const Options& o) { return number(o.lm.weight_decay); }},
      {"--eval-windows", [](const Options& o) { return std::to_string(o.lm.eval_windows); }},
      {"--sample-length", [](const Options& o) { return std::to_string(o.lm.sample_length); }},
  };
  return settings;
}

}  // namespace

std::optional<Checkpoint> resume(
    Options& o, const std::function<void(training::Layout&)>& describe) {
  const Options given = o;
  std::optional<Checkpoint> resumed = training::open_run(o.run, "ag-train", describe);
  if (!resumed) return resumed;
  std::string conflicts;
  for (const auto& [option, value] : run_defining_options())
    if (o.given.count(option) && value(given) != value(o))
      conflicts += (conflicts.empty() ? "" : ", ") + std::string(option) + " " + value(given) +
                   " (the run's: " + value(o) + ")";
  if (!conflicts.empty())
    throw training::UsageError("--resume " + o.run.resume +
                               ": a resumed run keeps the settings it started with: " + conflicts);
  return resumed;
}

}  // namespace ag_train

namespace {

using namespace ag;
using ag_train::Options;

// The defaults train the reverse task to 100% held-out exact-sequence accuracy (seeds 0–2, 44–46 s
// on one core of the machine in docs/training.md). They differ from d2l's chapter setting (32
// wide, FFN 64, dropout 0.1, constant lr 0.005, 2000 steps — which reaches about 50%, in PyTorch
// as in ag; see docs/training.md): twice the width, a wider FFN, no dropout (every batch is fresh
// data, so there is nothing to overfit) and a warm-up + cosine schedule.
Options default_options() {
  Options o;
  o.run.steps = 2500;
  o.run.batch_size = 64;
  o.run.lr = 0.002;
  o.model.num_hiddens = 64;
  o.model.ffn_num_hiddens = 256;
  o.model.num_heads = 4;
  o.model.num_layers = 2;
  o.model.dropout = 0.0;
  return o;
}

// What a task starts from where the command line gives no value: the model's sizes, the steps,
// the batch and the learning rate (each task then has a few of its own).
struct TaskDefaults {
  int64_t num_hiddens, ffn_num_hiddens, num_heads, num_layers;  // D, the FFN's width, H, L
  int64_t steps, batch_size;
  double lr;
};
void apply_defaults(const CLI::App& app, Options& o, const TaskDefaults& d) {
  auto unset = [&](const char* option) { return app.count(option) == 0; };
  if (unset("--num-hiddens")) o.model.num_hiddens = d.num_hiddens;
  if (unset("--ffn-num-hiddens")) o.model.ffn_num_hiddens = d.ffn_num_hiddens;
  if (unset("--heads")) o.model.num_heads = d.num_heads;
  if (unset("--layers")) o.model.num_layers = d.num_layers;
  if (unset("--steps")) o.run.steps = d.steps;
  if (unset("--batch-size")) o.run.batch_size = d.batch_size;
  if (unset("--lr")) o.run.lr = d.lr;
}

// The defaults of --task lm: the char-small model (D 128, 4 heads, FFN 512, block 64,
// AdamW lr 1e-3, 100 warm-up steps, then cosine to lr/10) with 2 blocks instead of 4, batch 16
// instead of 32 and no dropout (every window is almost fresh data), for 4000 steps — what ends
// within 5 minutes on one thread and samples mostly real English words (docs/training.md, "The
// default --task lm run"). The output layer is tied to the embedding (LMOptions::tie_weights).
void lm_defaults(const CLI::App& app, Options& o) {
  //                      D    FFN  H  L  steps  batch  lr
  apply_defaults(app, o, {128, 512, 4, 2, 4000, 16, 1e-3});
  auto unset = [&](const char* option) { return app.count(option) == 0; };
  if (unset("--warmup"))
    o.run.warmup = std::min<int64_t>(100, std::max<int64_t>(1, o.run.steps / 10));
  if (unset("--eval-every")) o.run.eval_every = 1000;
}

// --task translate starts from d2l's settings (d2l 0.17, "Transformer": num_hiddens 32, 2 layers,
// dropout 0.1, FFN 64, 4 heads, batch 64, num_steps 10, Adam lr 0.005, no schedule; min_freq 2 in
// load_data_nmt), for 2000 steps and 200 held-out pairs.
void translate_defaults(const CLI::App& app, Options& o) {
  //                      D   FFN H  L  steps  batch  lr
  apply_defaults(app, o, {32, 64, 4, 2, 2000, 64, 0.005});
  auto unset = [&](const char* option) { return app.count(option) == 0; };
  if (unset("--dropout")) o.model.dropout = 0.1;
  if (unset("--schedule")) o.run.schedule = "constant";
  if (unset("--eval-size")) o.eval_size = 200;
}

// The task a --resume file holds ("" when it cannot be read: the run reports why when it loads it).
std::string resumed_task(const std::string& path) {
  try {
    const Checkpoint c = load_checkpoint(path);
    return c.strings.count("config.task") ? c.string("config.task") : "";
  } catch (const std::exception&) {
    return "";
  }
}

void add_options(CLI::App& app, Options& o, training::OutputFiles& outputs) {
  using training::whole_number;
  app.add_option("--task", o.task,
         "copy | reverse | sort | add (what the defaults reach on each: docs/training.md) | "
         "translate (sentence pairs, d2l's settings: docs/text.md) | lm (a language model of "
         "text; its defaults: docs/training.md)")
      ->capture_default_str();
  app.add_option("--pairs", o.pairs,
      "translate: sentence pairs in d2l's fra.txt format (source<TAB>target a line); without it, "
      "a corpus ag generates (English to an invented language)");
  training::add_whole_number(
      app, "--generated-pairs", o.generated_pairs, "translate: pairs of the generated corpus");
  outputs.add(app, "--write-pairs", o.write_pairs, OutputKind::renamed_file,
      "write the generated corpus (--generated-pairs pairs) to this file in fra.txt format, and "
      "stop");
  training::add_whole_number(app, "--num-steps", o.num_steps,
      "translate: tokens of a sentence with <eos> (longer ones are cut, as d2l's truncate_pad)");
  training::add_whole_number(app, "--min-freq", o.min_freq, "translate: rarer words become <unk>");
  training::add_whole_number(app, "--beam", o.beam,
      "translate: the beam width of each evaluation's beam search (0: greedy only)");
  training::add_run_options(app, o.run, {"sequences per step", "Adam learning rate"});
  training::add_whole_number(app, "--num-hiddens", o.model.num_hiddens, "model width D");
  training::add_whole_number(
      app, "--ffn-num-hiddens", o.model.ffn_num_hiddens, "width of the position-wise FFN");
  training::add_whole_number(
      app, "--heads", o.model.num_heads, "attention heads (must divide --num-hiddens)");
  training::add_whole_number(app, "--layers", o.model.num_layers, "encoder and decoder blocks");
  app.add_option("--dropout", o.model.dropout, "dropout probability")->capture_default_str();
  app.add_option("--embedding-init", o.embedding_init,
         "toy tasks: how token embeddings start: normal (N(0, 1), d2l's) | scaled (N(0, 1/D): "
         "times √D, the size of the positional encoding); add's default: scaled "
         "(docs/training.md)")
      ->capture_default_str();
  training::add_whole_number(app, "--eval-size", o.eval_size, "held-out sequences");
  training::add_whole_number(app, "--show", o.show, "decoded examples printed at each evaluation");
  outputs.add(app, "--save-model", o.save_model, OutputKind::renamed_file,
      "at the end, save the model alone here (for ag-predict); a path ending in .safetensors gets "
      "PyTorch's format (docs/interop.md)");
  app.add_option("--curves-dir", o.curves_dir,
      "write training_curves.csv (a row per evaluation) and, at the end, "
      "training_curves.png (gnuplot) into this directory");
  outputs.add(app, "--attention-png", o.attention_png, OutputKind::renamed_file,
      "at the end, draw the attention weights of every layer and head "
      "for one decoded held-out example into this PNG");
  training::add_whole_number(app, "--attention-example", o.attention_example,
      "the held-out example drawn by --attention-png (-1: the first with the longest source)");
  add_lm_options(app, o.lm);  // --task lm only (lm_options.cpp)
}

// Option values CLI11 cannot check by type alone, task by task; then the shared ones
// (training::run_options_problem) and the outputs. "" if the run can start.
std::string options_problem(const CLI::App& app, Options& o, const training::OutputFiles& outputs) {
  const auto names = data::task_names();
  const bool translate = o.task == seq2seq::kTranslateTask, lm = o.task == "lm";
  if (!translate && !lm && std::find(names.begin(), names.end(), o.task) == names.end())
    return "unknown task '" + o.task + "' (known: copy, reverse, sort, add, translate, lm)";
  if (translate &&
      (o.num_steps < 1 || o.num_steps > 1000 || o.min_freq < 0 || o.beam < 0 ||
          o.beam > seq2seq::kMaxBeamSize || o.generated_pairs < 1 || o.generated_pairs > 1000000))
    return "--num-steps must be in 1-1000, --generated-pairs in 1-1000000, --beam in 0-" +
           std::to_string(seq2seq::kMaxBeamSize) + ", --min-freq not negative";
  if (translate && (!o.curves_dir.empty() || !o.attention_png.empty()))
    return "--curves-dir and --attention-png are for the toy tasks (ag-predict --attention-png "
           "draws a translation's attention)";
  if ((translate || lm) && app.count("--embedding-init"))
    return "--embedding-init is for the toy tasks (copy, reverse, sort, add)";
  if (o.embedding_init != "normal" && o.embedding_init != "scaled")
    return "unknown --embedding-init '" + o.embedding_init + "' (known: normal, scaled)";
  if (const std::string problem = lm_options_problem(app, o); !problem.empty()) return problem;
  if (lm && (!o.curves_dir.empty() || !o.attention_png.empty()))
    return "--curves-dir and --attention-png are not for --task lm";
  if (const std::string problem = training::run_options_problem(o.run); !problem.empty())
    return problem;
  if (o.eval_size <= 0 || o.show < 0) return "--eval-size must be positive, --show not negative";
  if (o.attention_example < -1 || o.attention_example >= o.eval_size)
    return "--attention-example " + std::to_string(o.attention_example) + " must be -1 or in 0-" +
           std::to_string(o.eval_size - 1) + " (an index into the --eval-size held-out examples)";
  // The model's sizes, as a checkpoint's are checked (models/seq2seq_memory.h); then the memory of the
  // whole run, against --max-memory or what is available.
  try {
    seq2seq::check_model_config(o.model, seq2seq::SettingNames::options);
  } catch (const ValueError& e) {
    return e.what();
  }
  if (o.run.resume.empty() && !translate && !lm)
    if (const std::string problem = ag_train::toy_size_problem(o); !problem.empty()) return problem;
  if (const std::string problem = outputs.problem(); !problem.empty()) return problem;
  if (!o.curves_dir.empty()) {
    if (const std::string why = output_directory_problem(o.curves_dir); !why.empty())
      return "--curves-dir " + o.curves_dir + ": " + why;
    // training_curves.png is drawn at the end: without gnuplot, say so now, not after the run
    if (const std::string why = viz::gnuplot_problem(); !why.empty())
      return "--curves-dir draws training_curves.png with gnuplot, and " + why;
  }
  // The cosine schedule warms up for at least one step and must have steps after it.
  if (o.run.resume.empty() && o.run.schedule == "cosine" && o.run.warmup >= o.run.steps)
    return "--steps " + std::to_string(o.run.steps) + " leaves no step after the warm-up of " +
           std::to_string(o.run.warmup) +
           " (the cosine schedule needs at least 2 steps; or --schedule constant)";
  return "";
}

// --write-pairs: the generated corpus in d2l's fra.txt format, and nothing else.
int write_pairs(const Options& o, const training::OutputFiles& outputs) {
  if (const std::string why = outputs.problem(); !why.empty()) throw training::UsageError(why);
  try {
    training::report_removed(
        "ag-train", write_file_atomically(o.write_pairs,
                        data::synthetic_pairs_text(o.generated_pairs, 0), "--write-pairs")
                        .removed_temp_files);
  } catch (const std::exception& e) {
    throw training::UsageError(e.what());
  }
  std::printf("wrote %lld generated pairs to %s\n", static_cast<long long>(o.generated_pairs),
      o.write_pairs.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Ctrl-C's policy, and MPI under mpirun (started on its own, ag-train never touches MPI).
  const auto mpi = training::start("ag-train", argc, argv);
  Options o = default_options();
  CLI::App app{
      "ag-train: train a d2l Transformer on a toy sequence task (copy, reverse, sort, add), on "
      "sentence pairs (translate), or a language model on text (lm)"};
  training::OutputFiles outputs;  // --save-model, --attention-png, --write-pairs
  add_options(app, o, outputs);
  return training::run_main("ag-train", app, argc, argv, [&] {
    for (const CLI::Option* option : app.get_options())
      if (option->count() > 0) o.given.insert(option->get_name());
    if (!o.run.resume.empty()) {  // the run's task is the file's
      const std::string task = resumed_task(o.run.resume);
      if (app.count("--task") && !task.empty() && task != o.task)
        throw training::UsageError("--task " + o.task + ", but " + o.run.resume + " holds a " +
                                   task + " run (--resume needs no --task)");
      if (!task.empty()) o.task = task;
    }
    if (o.task == "lm") lm_defaults(app, o);
    if (o.task == seq2seq::kTranslateTask) translate_defaults(app, o);
    // The add task's own default: its sums need where each digit is, which the positional
    // encoding tells only when the embeddings do not drown it (toy.cpp, docs/training.md).
    if (o.task == "add" && app.count("--embedding-init") == 0) o.embedding_init = "scaled";
    if (!o.write_pairs.empty()) return write_pairs(o, outputs);
    if (const std::string problem = options_problem(app, o, outputs); !problem.empty())
      throw training::UsageError(problem);
    set_num_threads(o.run.threads);
    if (o.task == "lm") return ag_train::train_lm(o);
    if (o.task == seq2seq::kTranslateTask) return ag_train::train_translate(o);
    return ag_train::train_toy(o);
  });
}
