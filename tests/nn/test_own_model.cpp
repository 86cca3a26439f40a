// A user's own model, nanoGPT's GPT in miniature, written only with ag's public API: the worked
// example of docs/own_model.md, which quotes it. Each piece sits beside the nanoGPT line it
// translates (model.py, Karpathy 2022). The tests check what a user relies on: nanoGPT's names and
// parameter count with the tied head, a float64 gradient check of a block, AdamW with nanoGPT's
// two groups, and a loss that falls.
#include <cmath>
#include <string>
#include <vector>

#include "nn_test_util.h"
#include "optim/optimizer.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace gpt {

struct Config {
  int64_t block_size = 8, vocab_size = 11, n_layer = 2, n_head = 2, n_embd = 8;
};

// class CausalSelfAttention(nn.Module)
struct CausalSelfAttention : nn::Module {
  explicit CausalSelfAttention(const Config& c) : n_head(c.n_head), n_embd(c.n_embd) {}
  int64_t n_head, n_embd;
  // self.c_attn = nn.Linear(n_embd, 3 * n_embd): the key, query and value projections at once
  std::shared_ptr<nn::Linear> c_attn =
      register_module("c_attn", std::make_shared<nn::Linear>(n_embd, 3 * n_embd));
  std::shared_ptr<nn::Linear> c_proj =  // self.c_proj = nn.Linear(n_embd, n_embd)
      register_module("c_proj", std::make_shared<nn::Linear>(n_embd, n_embd));
  std::string type_name() const override { return "CausalSelfAttention"; }

  Tensor forward(const Tensor& x) const {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head;
    const Tensor qkv = c_attn->forward(x);  // (B, T, 3C)
    // q, k, v = self.c_attn(x).split(self.n_embd, dim=2); k.view(B, T, nh, hs).transpose(1, 2)
    auto heads = [&](int64_t i) {
      return qkv.narrow(2, i * C, C).reshape({B, T, n_head, hs}).permute({0, 2, 1, 3});
    };
    const Tensor q = heads(0), k = heads(1), v = heads(2);  // (B, nh, T, hs) views
    // y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    const Tensor y = attention(q, k, v, {.is_causal = true});  // (B, nh, T, hs)
    // y.transpose(1, 2).contiguous().view(B, T, C), then self.c_proj(y)
    return c_proj->forward(y.permute({0, 2, 1, 3}).reshape({B, T, C}));  // (B, T, C)
  }
};

// class MLP(nn.Module): c_fc, GELU, c_proj (nanoGPT's new_gelu is the tanh approximation)
struct MLP : nn::Module {
  explicit MLP(const Config& c)
      : net(register_module("net",
            std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(c.n_embd, 4 * c.n_embd),
                std::make_shared<nn::GELU>("tanh"),
                std::make_shared<nn::Linear>(4 * c.n_embd, c.n_embd)))) {}
  std::shared_ptr<nn::Sequential> net;
  std::string type_name() const override { return "MLP"; }
  Tensor forward(const Tensor& x) const { return net->forward(x); }
};

// class Block(nn.Module): pre-norm, x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
struct Block : nn::Module {
  explicit Block(const Config& c)
      : ln_1(register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{c.n_embd}))),
        attn(register_module("attn", std::make_shared<CausalSelfAttention>(c))),
        ln_2(register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{c.n_embd}))),
        mlp(register_module("mlp", std::make_shared<MLP>(c))) {}
  std::shared_ptr<nn::LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
  std::string type_name() const override { return "Block"; }
  Tensor forward(const Tensor& x) const {
    const Tensor h = x + attn->forward(ln_1->forward(x));  // (B, T, C)
    return h + mlp->forward(ln_2->forward(h));
  }
};

// class GPT(nn.Module)
struct GPT : nn::Module {
  explicit GPT(const Config& c) : config(c) {
    // self.transformer = nn.ModuleDict(dict(wte=..., wpe=..., h=nn.ModuleList(...), ln_f=...))
    transformer->insert("wte", wte);
    transformer->insert("wpe", wpe);
    transformer->insert("h", h);
    for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
    transformer->insert("ln_f", ln_f);
    // self.transformer.wte.weight = self.lm_head.weight: one tensor, listed once
    wte->weight = lm_head->weight;
    // self.apply(self._init_weights): N(0, 0.02) weights, zero biases
    apply([](nn::Module& m) {
      if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
        nn::init::normal_(linear->weight, 0.0, 0.02);
        if (linear->bias.defined()) nn::init::zeros_(linear->bias);
      } else if (auto* embedding = dynamic_cast<nn::Embedding*>(&m)) {
        nn::init::normal_(embedding->weight, 0.0, 0.02);
      }
    });
  }
  Config config;
  std::shared_ptr<nn::ModuleDict> transformer =
      register_module("transformer", std::make_shared<nn::ModuleDict>());
  std::shared_ptr<nn::Embedding> wte =
      std::make_shared<nn::Embedding>(config.vocab_size, config.n_embd);
  std::shared_ptr<nn::Embedding> wpe =
      std::make_shared<nn::Embedding>(config.block_size, config.n_embd);
  std::shared_ptr<nn::ModuleList> h = std::make_shared<nn::ModuleList>();
  std::shared_ptr<nn::LayerNorm> ln_f = std::make_shared<nn::LayerNorm>(Shape{config.n_embd});
  std::shared_ptr<nn::Linear> lm_head = register_module(
      "lm_head", std::make_shared<nn::Linear>(config.n_embd, config.vocab_size, false));
  std::string type_name() const override { return "GPT"; }

  // idx (B, T) token ids -> logits (B, T, vocab_size)
  Tensor forward(const Tensor& idx) const {
    const int64_t T = idx.size(1);
    Tensor x = wte->forward(idx) + wpe->forward(arange(0, static_cast<double>(T)));  // (B, T, C)
    for (const auto& block : *h) x = std::static_pointer_cast<Block>(block)->forward(x);
    return lm_head->forward(ln_f->forward(x));  // (B, T, V)
  }
};

}  // namespace gpt

TEST_CASE("a nanoGPT-style model: nanoGPT's names and count, the head tied to the table",
    "[nn][own_model]") {
  manual_seed(0);
  const gpt::Config c;
  gpt::GPT model(c);
  const auto named = model.named_parameters();
  CHECK(named.front().first == "transformer.wte.weight");
  CHECK(model.state_dict().count("transformer.h.1.attn.c_attn.weight") == 1);
  CHECK(model.state_dict().count("lm_head.weight") == 1);  // both names of the tied tensor
  // nanoGPT's count: V·C + T·C + per block (2 LayerNorms, c_attn, c_proj, MLP) + ln_f; the head
  // is the table.
  const int64_t C = c.n_embd, block = 2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) +
                                      (C * 4 * C + 4 * C) + (4 * C * C + C);
  CHECK(model.num_parameters() == c.vocab_size * C + c.block_size * C + c.n_layer * block + 2 * C);
  CHECK(model.lm_head->weight.is_same(model.wte->weight));
}

TEST_CASE("a nanoGPT-style block passes a float64 gradient check of input and parameters",
    "[nn][own_model]") {
  manual_seed(1);
  gpt::Block block(gpt::Config{});
  block.to(float64);
  Tensor x = randn({2, 5, 8}, float64).requires_grad_();
  CHECK(gradcheck([&](const std::vector<Tensor>& in) { return block.forward(in[0]); }, {x}).passed);
  const GradcheckResult params =
      gradcheck_parameters([&] { return block.forward(x.detach()); }, block.named_parameters());
  INFO(params.message);
  CHECK(params.passed);
}

TEST_CASE("a nanoGPT-style model trains with AdamW's two groups", "[nn][own_model]") {
  manual_seed(2);
  gpt::GPT model(gpt::Config{});
  // nanoGPT's configure_optimizers: decay the 2-D tensors, not biases and LayerNorm weights.
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : model.named_parameters())
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamW optimizer({{decay, {}, 0.1}, {no_decay, {}, 0.0}}, 3e-3, {0.9, 0.95});
  CHECK(optimizer.param_groups().size() == 2);
  // A sequence to memorise: next token = (token + 1) mod 11.
  const Tensor idx = tensor({0, 1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 8});
  const Tensor targets = tensor({1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8, 9, 10, 0}, {16});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    const Tensor logits = model.forward(idx);                              // (2, 8, 11)
    const Tensor loss = cross_entropy(logits.reshape({16, 11}), targets);  // mean over 16
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    (step == 0 ? first : last) = loss.item();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(first == Approx(std::log(11.0)).epsilon(0.05));  // nanoGPT's init starts near log V
  CHECK(last < 0.5 * first);
}
