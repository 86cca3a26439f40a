// An optimizer's state dict (optim::StateDict) as checkpoint entries, and back.
//
// The entry names are those of ag's version-1 files, so files written before optimizers had
// state_dict() load unchanged. Under a prefix ("optimizer" in ag-train's checkpoints):
//
//   optimizer.type                         "Adam"          string
//   optimizer.groups                       1               integer: the number of groups
//   optimizer.group.0.size                 12              integer: group 0's parameter count
//   optimizer.group.0.lr, .weight_decay    0.001, 0        reals, per group
//   optimizer.beta1, .beta2, .eps          (Adam, AdamW)   reals, once for the whole optimizer
//   optimizer.momentum, .dampening         (SGD)           reals, once for the whole optimizer
//   optimizer.nesterov                     (SGD)           integer 0 or 1
//   optimizer.state.0.3.exp_avg            tensor: state of parameter 3 *of group 0*
//   optimizer.state.0.3.step               integer
//
// Two things differ from the state dict, which numbers parameters like torch.optim:
//   - the file numbers a parameter's state by group and position in the group ("state.1.0"), the
//     state dict across all groups (group 1's first parameter is number size(group 0));
//   - the file keeps every hyper-parameter except lr and weight_decay once, because ag's
//     optimizers share them between groups; the state dict repeats them in every group.
#pragma once

#include <string>

#include "io/checkpoint.h"
#include "optim/optimizer.h"

namespace ag {

// Writes `state` into `checkpoint` under `prefix`. Throws CheckpointError for a state dict that a
// version-1 file cannot hold: groups that disagree on a shared hyper-parameter, a negative count,
// a parameter number outside the groups.
void put_optimizer_state(
    Checkpoint& checkpoint, const optim::StateDict& state, const std::string& prefix = "optimizer");

// Reads the state dict under `prefix`. Throws CheckpointError when there is none ("no optimizer
// state under 'optimizer'") or when its entries are incomplete or malformed. Whether the state
// fits a particular optimizer is Optimizer::load_state_dict's to check.
optim::StateDict get_optimizer_state(
    const Checkpoint& checkpoint, const std::string& prefix = "optimizer");

}  // namespace ag
