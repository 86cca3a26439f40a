// ag-length-extrapolation — trains the same character language model once per way of giving it
// positions, at one block size, then measures each on longer contexts than it ever saw: does the
// model still predict well at position 300 when it was trained on windows of 64?
//
//   ag-length-extrapolation --out-dir extrapolation        # the experiment of docs/text.md
//   ag-length-extrapolation --positions rope,alibi --steps 500 --contexts 64,256
//
// The schemes (nn::PositionScheme): sinusoidal (d2l's), learned (nanoGPT's), rope, alibi, none.
// Each is the model of lm::char_small_config (D 128, 4 heads, 4 blocks, FFN 512, block 64,
// dropout 0.1) with only its positions changed, trained on the same windows of Debian's fortunes
// (or --text) for --steps steps of AdamW with a cosine schedule, from the same seed. Then, with no
// further training, LanguageModel::extend_context lets it read contexts of C tokens and
// lm::loss_by_position gives its validation loss at each position of the first --eval-tokens
// validation characters cut into windows of C. A learned table has no row past the block: that
// scheme is measured at the trained length only.
//
// Written to --out-dir:
//   extrapolation.csv, .png      the mean validation loss against the context C, a curve per scheme
//   loss_by_position.csv, .png   at the longest context: the loss at each position (in buckets of
//                                16), which shows where past the block a scheme breaks down
//   attention_SCHEME.png         its attention at the longest context (learned: at its block):
//                                every block's heads, the weights on a log scale (log10, from
//                                1e-6), averaged over squares of positions to fit 128 × 128 cells
// and the tables, as Markdown, to stdout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "data/text_corpus.h"
#include "models/lm.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "training/cli.h"
#include "viz/curves.h"
#include "viz/heatmap.h"

namespace {

using namespace ag;

struct Options {
  std::vector<std::string> positions{"sinusoidal", "learned", "rope", "alibi", "none"};
  std::vector<int64_t> contexts{64, 128, 256, 512};
  std::vector<std::string> text;  // files; none: Debian's fortunes
  int64_t steps = 2000, batch_size = 32, block_size = 64, eval_tokens = 32768;
  int64_t num_hiddens = 128, heads = 4, layers = 4, ffn_num_hiddens = 512;
  double dropout = 0.1, lr = 1e-3;
  uint64_t seed = 0;
  int threads = 1;
  std::string out_dir = "extrapolation";
};

// The text as characters: the vocabulary of its training split and both splits' ids, as
// ag-train --task lm makes them (90 % / 10 % of the code points).
struct Text {
  data::Vocab vocab;
  std::vector<int64_t> train_ids, validation_ids;
};

Text read_text(const Options& o) {
  const data::TextCorpus corpus =
      o.text.empty() ? data::read_fortunes() : data::read_text_files(o.text);
  const auto [train_text, validation_text] = lm::split_text(corpus.text, 0.9);
  data::TokenCounter counter;
  counter.add_chars(train_text);
  Text text{data::Vocab(counter), {}, {}};
  text.train_ids = text.vocab.char_ids(train_text);
  text.validation_ids = text.vocab.char_ids(validation_text);
  return text;
}

// Trains a fresh model with these positions: the same seed, windows and schedule for every scheme.
std::shared_ptr<nn::LanguageModel> train(
    const Options& o, const Text& text, nn::PositionScheme positions) {
  nn::LanguageModelConfig config = lm::char_small_config(text.vocab.size());
  config.num_hiddens = o.num_hiddens;
  config.num_heads = o.heads;
  config.num_layers = o.layers;
  config.ffn_num_hiddens = o.ffn_num_hiddens;
  config.block_size = o.block_size;
  config.dropout = o.dropout;
  config.positions = positions;
  lm::check_config(config, /*options=*/true);
  manual_seed(o.seed);
  auto model = lm::make_language_model(config);
  optim::AdamW optimizer(model->parameters(), o.lr, {0.9, 0.99}, 1e-8, 0.1);
  const int64_t warmup = std::min<int64_t>(100, std::max<int64_t>(1, o.steps / 10));
  optim::Scheduler scheduler(optimizer, optim::cosine_with_warmup(warmup, o.steps, 0.1));
  Generator windows(o.seed + 1);
  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  for (int64_t step = 1; step <= o.steps; ++step) {
    const data::LMBatch batch =
        data::sample_lm_batch(text.train_ids, o.batch_size, o.block_size, windows);
    loss = lm::train_step(*model, optimizer, batch.inputs, batch.labels, /*clip=*/1.0);
    scheduler.step();
    if (!std::isfinite(loss))
      fail<ValueError>(nn::position_scheme_name(positions), ": the loss is ", loss, " at step ",
          step, " (a smaller --lr)");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%-10s  %lld parameters, %lld steps in %.0f s (%.1f ms/step), last training loss "
      "%.4f\n",
      nn::position_scheme_name(positions).c_str(), static_cast<long long>(model->num_parameters()),
      static_cast<long long>(o.steps), seconds, 1000 * seconds / static_cast<double>(o.steps),
      loss);
  std::fflush(stdout);
  return model;
}

// The mean of v[from …].
double average(const std::vector<double>& v, std::size_t from = 0) {
  double total = 0;
  for (std::size_t i = from; i < v.size(); ++i) total += v[i];
  return v.size() > from ? total / static_cast<double>(v.size() - from) : 0.0;
}

// Every block's attention weights at one window of `context` validation tokens, as the heatmaps
// draw them: (L, H, C', C') of log10(max(weight, 1e-6)), C' = C / f, each cell the mean weight of
// an f × f square of (query, key) pairs, f the smallest divisor of C that brings C' to 128 or less.
Tensor attention_picture(nn::LanguageModel& model, const Text& text, int64_t context) {
  NoGradGuard no_grad;
  model.eval();
  const std::vector<int64_t> window(
      text.validation_ids.begin(), text.validation_ids.begin() + context);
  model.forward(tensor(window, {1, context}));
  const Tensor weights = concat(model.attention_weights(), 0);  // (L, H, C, C)
  int64_t f = 1;
  while (context / f > 128 || context % f != 0) ++f;
  const int64_t L = weights.size(0), H = weights.size(1), small = context / f;
  const Tensor squares = weights.reshape({L, H, small, f, small, f});  // (L, H, C', f, C', f)
  const Tensor pooled = mean(squares, {3, 5});                         // (L, H, C', C')
  return log(clamp(pooled, 1e-6, 1.0)) / std::log(10.0);               // log10, in [−6, 0]
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) items.push_back(item);
  return items;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string positions = "sinusoidal,learned,rope,alibi,none", contexts = "64,128,256,512";
  CLI::App app{
      "ag-length-extrapolation: the same character language model with each position "
      "scheme, trained at one block size and measured on longer contexts"};
  app.add_option("--positions", positions, "the schemes, comma-separated")->capture_default_str();
  app.add_option("--contexts", contexts, "the context lengths measured, comma-separated")
      ->capture_default_str();
  app.add_option("--text", o.text, "UTF-8 text files (default: Debian's fortunes)");
  training::add_whole_number(app, "--steps", o.steps, "training steps per scheme");
  training::add_whole_number(app, "--batch-size", o.batch_size, "windows per step");
  training::add_whole_number(app, "--block-size", o.block_size, "the trained context");
  training::add_whole_number(app, "--num-hiddens", o.num_hiddens, "model width D");
  training::add_whole_number(app, "--heads", o.heads, "attention heads");
  training::add_whole_number(app, "--layers", o.layers, "blocks");
  training::add_whole_number(app, "--ffn-num-hiddens", o.ffn_num_hiddens, "FFN width");
  app.add_option("--dropout", o.dropout, "dropout probability")->capture_default_str();
  app.add_option("--lr", o.lr, "AdamW's peak learning rate")->capture_default_str();
  training::add_whole_number(app, "--eval-tokens", o.eval_tokens,
      "validation tokens measured at every context (cut into windows of the context)");
  training::add_whole_number(app, "--seed", o.seed, "seeds the models and the windows");
  training::add_whole_number(app, "--threads", o.threads, "threads of ag's pool");
  app.add_option("--out-dir", o.out_dir, "where the CSV files and pictures go")
      ->capture_default_str();
  return training::run_main("ag-length-extrapolation", app, argc, argv, [&] {
    // ---- the options ----
    std::vector<nn::PositionScheme> schemes;
    try {
      for (const std::string& name : split_list(positions))
        schemes.push_back(nn::parse_position_scheme(name, "--positions"));
      o.contexts.clear();
      for (const std::string& c : split_list(contexts)) o.contexts.push_back(std::stoll(c));
    } catch (const std::logic_error& e) {  // ValueError, or stoll's invalid_argument
      throw training::UsageError(std::string("--positions / --contexts: ") + e.what());
    }
    std::sort(o.contexts.begin(), o.contexts.end());
    if (schemes.empty() || o.contexts.empty() || o.contexts.front() < 1)
      throw training::UsageError(
          "--positions and --contexts need at least one entry each, and "
          "every context must be positive");
    if (o.threads < 1 || o.threads > max_num_threads())
      throw training::UsageError("--threads " + std::to_string(o.threads) + " is outside 1-" +
                                 std::to_string(max_num_threads()));
    const int64_t longest = o.contexts.back();
    if (o.eval_tokens < longest)
      throw training::UsageError("--eval-tokens " + std::to_string(o.eval_tokens) +
                                 " is shorter than the longest context " + std::to_string(longest));
    if (const std::string problem = viz::gnuplot_problem(); !problem.empty())
      throw training::UsageError(problem + " (the curves are drawn by gnuplot)");
    set_num_threads(o.threads);
    std::filesystem::create_directories(o.out_dir);

    const Text text = read_text(o);
    if (static_cast<int64_t>(text.validation_ids.size()) < o.eval_tokens + 1)
      throw training::UsageError("the validation split has " +
                                 std::to_string(text.validation_ids.size()) +
                                 " tokens, fewer than --eval-tokens + 1");
    std::printf(
        "%lld training and %lld validation characters, vocabulary %lld; block %lld, "
        "contexts %s, %lld validation tokens each\n",
        static_cast<long long>(text.train_ids.size()),
        static_cast<long long>(text.validation_ids.size()),
        static_cast<long long>(text.vocab.size()), static_cast<long long>(o.block_size),
        contexts.c_str(), static_cast<long long>(o.eval_tokens));

    // ---- train each scheme, then read longer contexts with it ----
    const double missing = std::numeric_limits<double>::quiet_NaN();
    // loss[s][c]: the mean loss at context c; beyond[s][c]: over positions block … c − 1.
    std::vector<std::vector<double>> loss(schemes.size()), beyond(schemes.size());
    std::vector<std::vector<double>> by_position(schemes.size());  // at the longest context
    for (std::size_t s = 0; s < schemes.size(); ++s) {
      auto model = train(o, text, schemes[s]);
      const std::string name = nn::position_scheme_name(schemes[s]);
      for (const int64_t C : o.contexts) {
        if (schemes[s] == nn::PositionScheme::learned && C > o.block_size) {
          loss[s].push_back(missing);  // no row of the table for position block_size and later
          beyond[s].push_back(missing);
          continue;
        }
        model->extend_context(std::max(C, o.block_size));
        const std::vector<double> per_position =
            lm::loss_by_position(*model, text.validation_ids, C, o.eval_tokens / C, 16);
        loss[s].push_back(average(per_position));
        beyond[s].push_back(C > o.block_size
                                ? average(per_position, static_cast<std::size_t>(o.block_size))
                                : missing);
        if (C == longest) by_position[s] = per_position;
      }
      {
        // At the longest context it can read: a learned table's block at most.
        const int64_t context =
            schemes[s] == nn::PositionScheme::learned ? std::min(longest, o.block_size) : longest;
        const Tensor picture = attention_picture(*model, text, context);  // (L, H, C', C')
        viz::ShowHeatmapsOptions panels;
        panels.xlabel = "keys";
        panels.ylabel = "queries";
        for (int64_t h = 0; h < picture.size(1); ++h)
          panels.titles.push_back("head " + std::to_string(h) + ": log10 weight");
        for (int64_t l = 0; l < picture.size(0); ++l)
          panels.row_titles.push_back("block " + std::to_string(l));
        panels.cell = std::max<int64_t>(1, 256 / picture.size(2));
        viz::show_heatmaps(picture, o.out_dir + "/attention_" + name + ".png", panels);
      }
    }

    // ---- the tables ----
    auto print_table = [&](const char* title, const std::vector<std::vector<double>>& values) {
      std::printf("\n%s\n\n| positions |", title);
      for (const int64_t C : o.contexts) std::printf(" %lld |", static_cast<long long>(C));
      std::printf("\n|---|");
      for (std::size_t c = 0; c < o.contexts.size(); ++c) std::printf("---:|");
      std::printf("\n");
      for (std::size_t s = 0; s < schemes.size(); ++s) {
        std::printf("| %s |", nn::position_scheme_name(schemes[s]).c_str());
        for (const double v : values[s])
          std::isnan(v) ? std::printf(" — |") : std::printf(" %.4f |", v);
        std::printf("\n");
      }
    };
    print_table("Validation loss (nats per character) at each context:", loss);
    print_table("The same, over the positions past the trained block only:", beyond);
    std::fflush(stdout);

    // ---- the curves ----
    std::vector<std::string> header{"context"};
    std::vector<std::vector<double>> columns{{}};
    for (const int64_t C : o.contexts) columns[0].push_back(static_cast<double>(C));
    viz::LinePanel panel;
    panel.title =
        "validation loss against context (trained at block " + std::to_string(o.block_size) + ")";
    panel.xlabel = "context (tokens)";
    panel.ylabel = "loss (nats per character)";
    for (std::size_t s = 0; s < schemes.size(); ++s) {
      const std::string name = nn::position_scheme_name(schemes[s]);
      header.push_back(name);
      columns.push_back(loss[s]);
      panel.curves.push_back({name, name});
    }
    viz::write_csv(o.out_dir + "/extrapolation.csv", header, columns);
    viz::LineFigure figure;
    figure.panels = {panel};
    figure.points = true;
    viz::plot_csv(o.out_dir + "/extrapolation.csv", o.out_dir + "/extrapolation.png", figure);
    // the loss at each position of the longest context, in buckets of 16 positions
    const int64_t bucket = std::min<int64_t>(16, longest);
    std::vector<std::vector<double>> position_columns{{}};
    std::vector<std::string> position_header{"position"};
    viz::LinePanel position_panel;
    position_panel.title = "validation loss at each position, context " + std::to_string(longest);
    position_panel.xlabel = "position (the block ends at " + std::to_string(o.block_size) + ")";
    position_panel.ylabel = "loss (nats per character)";
    for (int64_t t = 0; t + bucket <= longest; t += bucket)
      position_columns[0].push_back(static_cast<double>(t) + static_cast<double>(bucket - 1) / 2);
    for (std::size_t s = 0; s < schemes.size(); ++s) {
      if (by_position[s].empty()) continue;
      const std::string name = nn::position_scheme_name(schemes[s]);
      std::vector<double> buckets;
      for (int64_t t = 0; t + bucket <= longest; t += bucket)
        buckets.push_back(average(
            std::vector<double>(by_position[s].begin() + t, by_position[s].begin() + t + bucket)));
      position_header.push_back(name);
      position_columns.push_back(buckets);
      position_panel.curves.push_back({name, name});
    }
    viz::write_csv(o.out_dir + "/loss_by_position.csv", position_header, position_columns);
    viz::LineFigure position_figure;
    position_figure.panels = {position_panel};
    viz::plot_csv(
        o.out_dir + "/loss_by_position.csv", o.out_dir + "/loss_by_position.png", position_figure);
    std::printf(
        "\nwrote %s/extrapolation.{csv,png}, loss_by_position.{csv,png} and "
        "attention_*.png\n",
        o.out_dir.c_str());
    return 0;
  });
}
