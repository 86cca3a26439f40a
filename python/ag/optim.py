"""ag.optim: SGD, Adam, AdamW and their schedules (python/src/optim.cpp).

    optimizer = ag.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    scheduler = ag.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.95 ** epoch)
    for x, y in batches:
        optimizer.zero_grad()
        loss = ag.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()

As torch.optim: params is an iterable of tensors or a list of groups, dicts with "params" and
their own "lr" and "weight_decay" (ag keeps one value of the other options for all groups);
optimizer.param_groups[i]["lr"] reads and sets a group's learning rate; state_dict() has
torch.optim's "state" and "param_groups" (and "type", which load_state_dict checks).

ag's schedules are multipliers f(t) of each group's base lr at update t = 1, 2, ...
(optim/schedule.h): step_decay, cosine_with_warmup, transformer_schedule. lr_scheduler holds them
as schedulers: StepLR and LambdaLR under PyTorch's names and arguments, CosineWithWarmupLR and
TransformerLR (no PyTorch equivalent) under ag's, and Scheduler(optimizer, f) for any f.
"""

import inspect as _inspect
import sys as _sys
import types as _types

from ._C.optim import (  # noqa: F401
    SGD,
    Adam,
    AdamW,
    Optimizer,
    Schedule,
    cosine_with_warmup,
    step_decay,
    transformer_schedule,
)
from ._C.optim import Scheduler as _Scheduler


def _set_signature(cls, *positional, **keyword_only):
    """The constructor's arguments as inspect.signature shows a Python class's (a pybind11 class
    has none to show): nanoGPT's configure_optimizers asks inspect.signature(torch.optim.AdamW)
    whether it takes fused=. tests/python/test_optim.py holds the defaults to the C++ ones."""
    kind, named = _inspect.Parameter.POSITIONAL_OR_KEYWORD, _inspect.Parameter.KEYWORD_ONLY
    parameters = [_inspect.Parameter(name, kind, default=default) for name, default in positional]
    parameters += [_inspect.Parameter(name, named, default=v) for name, v in keyword_only.items()]
    cls.__signature__ = _inspect.Signature(parameters)


_required = _inspect.Parameter.empty
_set_signature(SGD, ("params", _required), ("lr", _required), ("momentum", 0.0), ("dampening", 0.0),
               ("weight_decay", 0.0), ("nesterov", False), maximize=False)
_set_signature(Adam, ("params", _required), ("lr", 1e-3), ("betas", (0.9, 0.999)), ("eps", 1e-8),
               ("weight_decay", 0.0), ("amsgrad", False))
_set_signature(AdamW, ("params", _required), ("lr", 1e-3), ("betas", (0.9, 0.999)), ("eps", 1e-8),
               ("weight_decay", 1e-2), ("amsgrad", False))


class LRScheduler:
    """Sets each group's lr to its base lr (the lr when the scheduler was made) times schedule(t)
    for update t = 1, 2, ...: t = 1 now, and one more at each step(). schedule: one of ag's
    (ag.optim.cosine_with_warmup(...)) or any Python callable of t."""

    def __init__(self, optimizer, schedule, last_epoch=-1):
        if last_epoch != -1:
            raise ValueError(
                f"{type(self).__name__}: ag's schedulers start at the beginning (last_epoch=-1); "
                "load_state_dict continues a saved one"
            )
        self.optimizer = optimizer
        self._scheduler = _Scheduler(optimizer, schedule)

    def step(self):
        """Moves to the next update and sets its lr."""
        self._scheduler.step()

    def get_last_lr(self):
        """The lr of each group, as the last step() set it."""
        return [group["lr"] for group in self.optimizer.param_groups]

    @property
    def last_epoch(self):
        """PyTorch's count of step() calls (0 when the scheduler is made)."""
        return self._scheduler.current_step - 1

    def state_dict(self):
        return {"last_epoch": self.last_epoch}

    def load_state_dict(self, state_dict):
        """Continues from a saved scheduler: the lr of the update after its last step()."""
        self._scheduler.current_step = state_dict["last_epoch"] + 1


class LambdaLR(LRScheduler):
    """lr = base lr * lr_lambda(epoch), epoch = 0 when made, one more at each step()
    (torch.optim.lr_scheduler.LambdaLR). One lr_lambda for all groups."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        if isinstance(lr_lambda, (list, tuple)):
            if len(set(map(id, lr_lambda))) != 1:
                raise ValueError("LambdaLR: ag applies one lr_lambda to all groups")
            lr_lambda = lr_lambda[0]
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, lambda t: float(lr_lambda(t - 1)), last_epoch)


class StepLR(LRScheduler):
    """lr = base lr * gamma ** (epoch // step_size) (torch.optim.lr_scheduler.StepLR)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        super().__init__(optimizer, step_decay(step_size, gamma), last_epoch)


class CosineWithWarmupLR(LRScheduler):
    """ag's warm-up and cosine: linear from base/warmup to base over `warmup` updates, then a half
    cosine down to base * min_factor at update `total` (ag.optim.cosine_with_warmup)."""

    def __init__(self, optimizer, warmup, total, min_factor=0.0, last_epoch=-1):
        super().__init__(optimizer, cosine_with_warmup(warmup, total, min_factor), last_epoch)


class TransformerLR(LRScheduler):
    """The schedule of "Attention Is All You Need": base * d_model^-0.5 * min(t^-0.5,
    t * warmup^-1.5) (ag.optim.transformer_schedule; base lr 1 gives the paper's rates)."""

    def __init__(self, optimizer, d_model, warmup, last_epoch=-1):
        super().__init__(optimizer, transformer_schedule(d_model, warmup), last_epoch)


# ag.optim.lr_scheduler, as torch.optim.lr_scheduler (also `import ag.optim.lr_scheduler`).
lr_scheduler = _types.ModuleType(__name__ + ".lr_scheduler", "Learning-rate schedulers.")
for _cls in (LRScheduler, LambdaLR, StepLR, CosineWithWarmupLR, TransformerLR):
    setattr(lr_scheduler, _cls.__name__, _cls)
lr_scheduler.Scheduler = LRScheduler
_sys.modules[lr_scheduler.__name__] = lr_scheduler
