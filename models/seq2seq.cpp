#include "models/seq2seq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ag::seq2seq {

// ---- model --------------------------------------------------------------------------------------

std::shared_ptr<nn::EncoderDecoder> make_transformer(const ModelConfig& c) {
  // d2l: key_size = query_size = value_size = num_hiddens, norm_shape = [num_hiddens],
  // ffn_num_input = num_hiddens.
  auto encoder = std::make_shared<nn::TransformerEncoder>(c.vocab_size, c.num_hiddens,
      c.num_hiddens, c.num_hiddens, c.num_hiddens, std::vector<int64_t>{c.num_hiddens},
      c.num_hiddens, c.ffn_num_hiddens, c.num_heads, c.num_layers, c.dropout);
  auto decoder = std::make_shared<nn::TransformerDecoder>(c.target_vocab(), c.num_hiddens,
      c.num_hiddens, c.num_hiddens, c.num_hiddens, std::vector<int64_t>{c.num_hiddens},
      c.num_hiddens, c.ffn_num_hiddens, c.num_heads, c.num_layers, c.dropout);
  auto model = std::make_shared<nn::EncoderDecoder>(encoder, decoder);
  // d2l's train_seq2seq: xavier_uniform_ on the weight of every nn.Linear.
  model->apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) nn::init::xavier_uniform_(linear->weight);
  });
  return model;
}

// ---- training -----------------------------------------------------------------------------------

Tensor sequence_loss(nn::EncoderDecoder& model, const data::Batch& batch) {
  Tensor logits =
      model.forward(batch.source, batch.decoder_input, batch.source_valid_lens);  // (B, Tt, V)
  return nn::masked_softmax_ce(logits, batch.labels, batch.label_valid_lens);     // ()
}

double train_step(
    nn::EncoderDecoder& model, optim::Optimizer& optimizer, const data::Batch& batch, double clip) {
  Tensor loss = sequence_loss(model, batch);  // ()
  optimizer.zero_grad();
  loss.backward();  // frees the graph
  optim::clip_grad_norm(model.parameters(), clip);
  optimizer.step();
  return loss.item();
}

// ---- decoding and evaluation --------------------------------------------------------------------

std::vector<std::vector<int64_t>> greedy_decode(nn::EncoderDecoder& model, const Tensor& source,
    const Tensor& source_valid_lens, int64_t max_steps, int64_t bos, int64_t eos) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t B = source.size(0);
  Tensor enc_outputs = model.encoder->forward(source, source_valid_lens);  // (B, Ts, D)
  nn::DecoderState state = model.decoder->init_state(enc_outputs, source_valid_lens);
  Tensor next = full({B, 1}, static_cast<double>(bos));  // (B, 1)
  std::vector<std::vector<int64_t>> predictions(static_cast<std::size_t>(B));
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  for (int64_t step = 0; step < max_steps; ++step) {
    Tensor logits =
        model.decoder->forward(next, state);  // (B, 1, V): one new position, cached past
    next = argmax(logits, -1);                // (B, 1), int64
    const std::vector<int64_t> ids = next.to_vector<int64_t>();
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const int64_t id = ids[b];
      if (id == eos)
        done[b] = true;
      else
        predictions[b].push_back(id);
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
  model.train(was_training);
  return predictions;
}

// ---- beam search --------------------------------------------------------------------------------

BeamHypothesis beam_search(const NextLogProbs& next_log_probs, const BeamOptions& o) {
  if (o.beam_size < 1 || o.beam_size > kMaxBeamSize || o.max_steps < 1 || !(o.alpha >= 0) ||
      !std::isfinite(o.alpha))
    fail<ValueError>("beam_search: beam_size ", o.beam_size, ", max_steps ", o.max_steps,
        ", alpha ", o.alpha, " (need beam_size in 1-", kMaxBeamSize,
        ", max_steps at least 1, alpha finite, >= 0)");
  auto normalised = [&](double log_prob, int64_t length) {
    return log_prob / std::pow(static_cast<double>(length), o.alpha);  // 1/L^α · log P
  };
  std::vector<BeamHypothesis> beam(1), candidates;  // the start: no token, log P = 0
  std::vector<int64_t> parents{0}, tokens{o.bos};
  int64_t V = 0;
  for (int64_t step = 0; step < o.max_steps && !beam.empty(); ++step) {
    const std::vector<double> log_probs = next_log_probs(parents, tokens);  // (rows, V)
    const int64_t rows = static_cast<int64_t>(beam.size());
    if (step == 0) V = static_cast<int64_t>(log_probs.size());
    if (V == 0 || static_cast<int64_t>(log_probs.size()) != rows * V || o.bos < 0 || o.bos >= V ||
        o.eos < 0 || o.eos >= V)
      fail<ValueError>("beam_search: ", log_probs.size(), " log-probabilities for ", rows,
          " hypotheses (a vocabulary of ", V, "), bos ", o.bos, ", eos ", o.eos);
    // A NaN would break the ranking's ordering (a model whose weights diverged).
    for (std::size_t e = 0; e < log_probs.size(); ++e)
      if (std::isnan(log_probs[e]))
        fail<ValueError>("beam_search: log-probability ", e % static_cast<std::size_t>(V),
            " of hypothesis ", e / static_cast<std::size_t>(V), " is NaN at step ", step);
    // Every extension (row, token) by log P; the beam_size best, ties to the lower row, token.
    std::vector<int64_t> order(static_cast<std::size_t>(rows * V));
    std::iota(order.begin(), order.end(), int64_t{0});
    auto total = [&](int64_t e) { return beam[e / V].log_prob + log_probs[e]; };
    const std::size_t keep = std::min(order.size(), static_cast<std::size_t>(o.beam_size));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
        [&](int64_t a, int64_t b) {
          const double ta = total(a), tb = total(b);
          return ta > tb || (ta == tb && a < b);  // row-major: a < b is row, then token
        });
    std::vector<BeamHypothesis> kept;
    parents.clear();
    tokens.clear();
    for (std::size_t i = 0; i < keep; ++i) {
      const int64_t row = order[i] / V, token = order[i] % V;
      BeamHypothesis h = beam[row];
      h.log_prob = total(order[i]);
      if (token == o.eos) {
        h.length = static_cast<int64_t>(h.tokens.size()) + 1;
        h.finished = true;
        h.score = normalised(h.log_prob, h.length);
        candidates.push_back(std::move(h));
      } else {
        h.tokens.push_back(token);
        kept.push_back(std::move(h));
        parents.push_back(row);
        tokens.push_back(token);
      }
    }
    beam = std::move(kept);
  }
  for (BeamHypothesis& h : beam) {  // cut at max_steps: no <eos> in L or P
    h.length = static_cast<int64_t>(h.tokens.size());
    h.score = normalised(h.log_prob, h.length);
    candidates.push_back(std::move(h));
  }
  std::size_t best = 0;
  for (std::size_t i = 1; i < candidates.size(); ++i)
    if (candidates[i].score > candidates[best].score) best = i;
  return candidates[best];
}

std::vector<BeamHypothesis> beam_decode(nn::EncoderDecoder& model, const Tensor& source,
    const Tensor& source_valid_lens, const BeamOptions& options) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<BeamHypothesis> results;
  for (int64_t b = 0; b < source.size(0); ++b) {
    const Tensor one_source = source.narrow(0, b, 1);                        // (1, Ts)
    const Tensor one_valid_len = source_valid_lens.narrow(0, b, 1);          // (1,)
    Tensor enc_outputs = model.encoder->forward(one_source, one_valid_len);  // (1, Ts, D)
    nn::DecoderState state = model.decoder->init_state(enc_outputs, one_valid_len);
    auto next_log_probs = [&](const std::vector<int64_t>& parents,
                              const std::vector<int64_t>& tokens) {
      // The cache rows follow the hypotheses they belong to (a row may be copied or dropped).
      state.enc_outputs = index_select(state.enc_outputs, 0, parents);        // (rows, Ts, D)
      state.enc_valid_lens = index_select(state.enc_valid_lens, 0, parents);  // (rows,)
      for (Tensor& kv : state.key_values)
        if (kv.defined()) kv = index_select(kv, 0, parents);  // (rows, steps so far, D)
      const int64_t rows = static_cast<int64_t>(tokens.size());
      const Tensor logits = model.decoder->forward(
          tensor(std::vector<float>(tokens.begin(), tokens.end()), {rows, 1}),
          state);  // (rows, 1, V)
      const int64_t V = logits.size(2);
      // log softmax in double, from the float logits: x − (m + log Σ exp(x − m)), m = max x.
      const std::vector<float> x = logits.to_vector<float>();
      std::vector<double> log_probs(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * V;
        const double m = *std::max_element(row, row + V);
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - m);
        const double log_z = m + std::log(sum);
        for (int64_t v = 0; v < V; ++v) log_probs[r * V + v] = static_cast<double>(row[v]) - log_z;
      }
      return log_probs;
    };
    try {
      results.push_back(beam_search(next_log_probs, options));
    } catch (...) {
      model.train(was_training);
      throw;
    }
  }
  model.train(was_training);
  return results;
}

DecodedAttention decode_with_attention(nn::EncoderDecoder& model,
    const std::vector<int64_t>& source, int64_t max_steps, int64_t bos, int64_t eos,
    int64_t source_eos) {
  if (source.empty() || max_steps < 1)
    fail<ValueError>("decode_with_attention: a source of ", source.size(), " tokens and max_steps ",
        max_steps, " (need at least one of each)");
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  DecodedAttention result;
  result.source = source;
  result.source.push_back(source_eos);
  const int64_t Ts = static_cast<int64_t>(result.source.size());
  std::vector<float> source_ids(result.source.begin(), result.source.end());
  Tensor enc_X = tensor(source_ids, {1, Ts});                          // (1, Ts)
  Tensor enc_valid_lens = tensor(std::vector<float>{float(Ts)}, {1});  // (1,): nothing is padding
  Tensor enc_outputs = model.encoder->forward(enc_X, enc_valid_lens);  // (1, Ts, D)
  for (const Tensor& w : model.encoder->attention_weights())           // per layer (1, H, Ts, Ts)
    result.encoder.push_back(
        tensor(w.select(0, 0).to_vector<float>(), {w.size(1), Ts, Ts}));  // (H, Ts, Ts)

  nn::DecoderState state = model.decoder->init_state(enc_outputs, enc_valid_lens);
  const std::size_t layers = static_cast<std::size_t>(model.decoder->num_layers);
  // Per layer, per step t: the step's query row of every head, (H, 1, t + 1) and (H, 1, Ts), flat.
  std::vector<std::vector<std::vector<float>>> self_rows(layers), cross_rows(layers);
  int64_t H = 0;
  int64_t next = bos;
  for (int64_t step = 0; step < max_steps; ++step) {
    result.decoder_input.push_back(next);
    Tensor logits = model.decoder->forward(
        tensor(std::vector<float>{float(next)}, {1, 1}), state);  // (1, 1, V)
    const std::vector<Tensor> self =
        model.decoder->self_attention_weights();  // per layer (1, H, 1, step + 1)
    const std::vector<Tensor> cross =
        model.decoder->cross_attention_weights();  // per layer (1, H, 1, Ts)
    for (std::size_t l = 0; l < layers; ++l) {
      self_rows[l].push_back(self[l].to_vector<float>());
      cross_rows[l].push_back(cross[l].to_vector<float>());
    }
    H = self[0].size(1);
    next = static_cast<int64_t>(argmax(logits, -1).item());
    if (next == eos) break;
    result.prediction.push_back(next);
  }
  model.train(was_training);

  // Stack the rows: query t of head h holds t + 1 self-attention weights (keys 0 … t; the keys
  // after t did not exist yet, weight 0) and Ts encoder–decoder weights.
  const int64_t T = static_cast<int64_t>(result.decoder_input.size());
  for (std::size_t l = 0; l < layers; ++l) {
    std::vector<float> self(static_cast<std::size_t>(H * T * T), 0.0f),
        cross(static_cast<std::size_t>(H * T * Ts));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<float>& s = self_rows[l][static_cast<std::size_t>(t)];   // (H, 1, t + 1)
        const std::vector<float>& c = cross_rows[l][static_cast<std::size_t>(t)];  // (H, 1, Ts)
        for (int64_t k = 0; k <= t; ++k) self[(h * T + t) * T + k] = s[h * (t + 1) + k];
        for (int64_t k = 0; k < Ts; ++k) cross[(h * T + t) * Ts + k] = c[h * Ts + k];
      }
    result.decoder_self.push_back(tensor(self, {H, T, T}));  // (H, T, T)
    result.cross.push_back(tensor(cross, {H, T, Ts}));       // (H, T, Ts)
  }
  return result;
}

Evaluation evaluate(nn::EncoderDecoder& model, const data::Task& task,
    const std::vector<data::Example>& examples, int64_t batch_size) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  Evaluation result;
  double loss_sum = 0, tokens = 0, correct_tokens = 0, correct_sequences = 0;
  for (std::size_t start = 0; start < examples.size();
       start += static_cast<std::size_t>(batch_size)) {
    std::vector<data::Example> chunk(examples.begin() + static_cast<std::ptrdiff_t>(start),
        examples.begin() +
            static_cast<std::ptrdiff_t>(std::min(examples.size(), start + batch_size)));
    data::Batch batch = data::make_batch(chunk, task.source_steps(), task.target_steps());
    // Teacher forcing: loss and token accuracy over the valid label positions.
    Tensor logits =
        model.forward(batch.source, batch.decoder_input, batch.source_valid_lens);  // (B, Tt, V)
    const double valid = sum(batch.label_valid_lens).item();
    loss_sum += nn::masked_softmax_ce(logits, batch.labels, batch.label_valid_lens).item() * valid;
    tokens += valid;
    const std::vector<float> predicted = argmax(logits, -1).to_vector<float>();
    const std::vector<float> labels = batch.labels.to_vector<float>();
    const std::vector<float> lens = batch.label_valid_lens.to_vector<float>();
    const int64_t Tt = task.target_steps();
    for (int64_t b = 0; b < batch.size(); ++b)
      for (int64_t t = 0; t < static_cast<int64_t>(lens[b]); ++t)
        correct_tokens += predicted[b * Tt + t] == labels[b * Tt + t];
    // Greedy decoding: the whole target must come out, then <eos>.
    auto decoded = greedy_decode(model, batch.source, batch.source_valid_lens, Tt);
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      correct_sequences += decoded[i] == chunk[i].target;
      result.predictions.push_back(std::move(decoded[i]));
    }
  }
  model.train(was_training);
  result.loss = loss_sum / tokens;
  result.token_accuracy = correct_tokens / tokens;
  result.sequence_accuracy = correct_sequences / static_cast<double>(examples.size());
  return result;
}

}  // namespace ag::seq2seq
