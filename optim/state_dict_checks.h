// What is wrong with an optimizer's own hyper-parameters, in one function per optimizer that its
// constructor (optim/optimizer.cpp) and load_state_dict (optim/state_dict_checks.cpp) both call.
// Internal to ag::optim: not installed.
#pragma once

#include <string>
#include <vector>

namespace ag::optim {

// SGD's: momentum not negative, nesterov 1 or 0 (as a state dict holds it), Nesterov momentum
// only with momentum > 0 and dampening 0.
std::vector<std::string> sgd_problems(double momentum, double dampening, double nesterov);
// Adam's and AdamW's: both betas in [0, 1), eps not negative.
std::vector<std::string> adam_problems(double beta1, double beta2, double eps);

}  // namespace ag::optim
