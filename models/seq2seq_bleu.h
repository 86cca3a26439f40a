// BLEU of one predicted sentence against one label sentence, exactly as d2l's
// bleu(pred_seq, label_seq, k) ("Sequence to Sequence Learning", "Evaluation of Predicted
// Sequences"):
//
//   BLEU = exp(min(0, 1 − len_label / len_pred)) · Π_{n=1}^{min(k, len_pred)} p_n^(1/2^n)
//
// p_n is the clipped n-gram precision: the prediction's n-grams that also occur in the label
// (each label n-gram matched at most as often as it occurs there), over the prediction's
// len_pred − n + 1 n-grams. The first factor, the brevity penalty, punishes a prediction shorter
// than the label (a longer one is already punished by its precision); the weight 1/2^n gives a
// long matching n-gram more say than a short one (p_n ≤ 1, so a smaller exponent raises it less).
//
// It lives in models/ beside greedy and beam decoding: it scores a model's predictions (the
// evaluation of ag-train --task translate), it is not a step of preparing data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ag::seq2seq {

// Tokens as d2l splits them: Python's str.split(' ') — every single space separates, so "a  b"
// holds an empty token and "" is one empty token (never no token).
std::vector<std::string> split_on_spaces(std::string_view text);

// d2l's bleu(pred_seq, label_seq, k) on tokens. k < 1 throws ValueError (d2l would return the
// brevity penalty alone). An empty prediction — where d2l's 1 − len_label / len_pred divides by
// zero — scores 0: a model that translates a sentence into nothing has matched none of it, and
// the brevity penalty tends to 0 as len_pred → 0. ag returns 0 rather than throwing because
// decoding does produce empty predictions (a model early in training often emits <eos> first),
// and an evaluation over a held-out set must score them, not stop. (d2l itself never meets this
// case: it joins the predicted tokens into a string, and "".split(' ') is [''], one token.)
double bleu(const std::vector<std::string>& pred_tokens,
    const std::vector<std::string>& label_tokens, int64_t k);
// d2l's signature: both sentences split by split_on_spaces, so the result is Python's for every
// pair of strings.
double bleu(std::string_view pred_seq, std::string_view label_seq, int64_t k);

}  // namespace ag::seq2seq
