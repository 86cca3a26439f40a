"""ag.optim from Python: SGD, Adam, AdamW against their update rules in NumPy (PyTorch's
documented pseudocode), parameter groups, param_groups as live dicts, state dicts, schedulers."""

import inspect
import math

import numpy as np
import pytest

import ag
from ag import nn, optim


def a(t):
    return t.detach().numpy()


def params_and_grads(seed=0, shapes=((3,), (2, 2))):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    return values, grads


def run(optimizer_of, values, grads):
    params = [nn.Parameter(ag.tensor(v)) for v in values]
    opt = optimizer_of(params)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = ag.tensor(g)
        opt.step()
    return params, opt


def test_sgd_momentum_weight_decay_nesterov():
    values, grads = params_and_grads()
    lr, mu, wd = 0.1, 0.9, 0.01
    for nesterov in (False, True):
        params, opt = run(lambda ps: optim.SGD(ps, lr=lr, momentum=mu, weight_decay=wd, nesterov=nesterov), values, grads)
        for i, v in enumerate(values):
            theta, buf = v.astype(np.float64), None
            for step_grads in grads:
                g = step_grads[i] + wd * theta
                buf = g if buf is None else mu * buf + g
                theta = theta - lr * (g + mu * buf if nesterov else buf)
            np.testing.assert_allclose(a(params[i]), theta, rtol=1e-5, atol=1e-6)
        assert opt.momentum == mu and opt.nesterov == nesterov
    plain, _ = run(lambda ps: optim.SGD(ps, 0.5), values, grads[:1])
    np.testing.assert_allclose(a(plain[0]), values[0] - 0.5 * grads[0][0], rtol=1e-6)


def numpy_adam(v, gs, lr, b1, b2, eps, wd, decoupled):
    theta, m, s = v.astype(np.float64), 0.0, 0.0
    for t, g in enumerate(gs, start=1):
        if decoupled:
            theta = theta - lr * wd * theta
        else:
            g = g + wd * theta
        m = b1 * m + (1 - b1) * g
        s = b2 * s + (1 - b2) * g * g
        theta = theta - lr / (1 - b1**t) * m / (np.sqrt(s) / math.sqrt(1 - b2**t) + eps)
    return theta


@pytest.mark.parametrize("cls, decoupled", [(optim.Adam, False), (optim.AdamW, True)])
def test_adam_and_adamw(cls, decoupled):
    values, grads = params_and_grads(1)
    params, opt = run(lambda ps: cls(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), values, grads)
    for i, v in enumerate(values):
        expected = numpy_adam(v, [g[i] for g in grads], 0.01, 0.8, 0.99, 1e-6, 0.1, decoupled)
        np.testing.assert_allclose(a(params[i]), expected, rtol=1e-5, atol=1e-6)
    assert opt.betas == (0.8, 0.99) and opt.eps == 1e-6


def test_defaults_are_pytorchs():
    p = [nn.Parameter(ag.ones(1))]
    adam, adamw = optim.Adam(p), optim.AdamW(p)
    g = adam.param_groups[0]
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"]) == (1e-3, (0.9, 0.999), 1e-8, 0.0)
    assert adamw.param_groups[0]["weight_decay"] == 0.01
    sgd = optim.SGD(p, lr=0.1)
    assert (sgd.param_groups[0]["momentum"], sgd.param_groups[0]["nesterov"]) == (0.0, False)
    with pytest.raises(TypeError):
        optim.SGD(p)  # lr is required, as PyTorch's
    assert repr(adam).startswith("Adam (\nParameter Group 0\n    betas: (0.9, 0.999)")


def test_inspect_signature_shows_the_constructors_defaults():
    # nanoGPT's configure_optimizers: 'fused' in inspect.signature(torch.optim.AdamW).parameters
    p = [nn.Parameter(ag.ones(1))]
    for cls, kwargs in ((optim.Adam, {}), (optim.AdamW, {}), (optim.SGD, {"lr": 0.1})):
        signature = inspect.signature(cls)
        assert "fused" not in signature.parameters and "params" in signature.parameters
        group = cls(p, **kwargs).param_groups[0]
        for name, parameter in signature.parameters.items():
            if name in group and parameter.default is not inspect.Parameter.empty:
                assert group[name] == parameter.default, (cls.__name__, name)
    assert str(inspect.signature(optim.AdamW)) == (
        "(params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, amsgrad=False)")


def test_param_groups():
    lin = nn.Linear(3, 2)
    opt = optim.SGD([{"params": [lin.weight]}, {"params": lin.bias, "lr": 1.0, "weight_decay": 0.0}], lr=0.1, weight_decay=0.5)
    assert len(opt.param_groups) == 2
    g0, g1 = opt.param_groups
    assert (g0["lr"], g0["weight_decay"], g1["lr"], g1["weight_decay"]) == (0.1, 0.5, 1.0, 0.0)
    assert g0["params"][0].is_same(lin.weight) and len(g1["params"]) == 1
    assert set(g0.keys()) == {"params", "lr", "weight_decay", "momentum", "dampening", "nesterov"}
    # param_groups are live: setting lr changes the next step, as schedules do in PyTorch.
    for group in opt.param_groups:
        group["lr"] = 0.0
    w, b = a(lin.weight).copy(), a(lin.bias).copy()
    lin.weight.grad = ag.ones(2, 3)
    lin.bias.grad = ag.ones(2)
    opt.step()
    np.testing.assert_array_equal(a(lin.weight), w)
    opt.param_groups[1]["lr"] = 0.5
    opt.step()
    np.testing.assert_allclose(a(lin.bias), b - 0.5, rtol=1e-6)
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1].get("absent", 7) == 7
    with pytest.raises(ValueError):
        opt.param_groups[0]["momentum"] = 0.9  # one value for all groups in ag
    with pytest.raises(ValueError):
        opt.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError, match="momentum"):
        optim.SGD([{"params": [lin.weight], "momentum": 0.9}], lr=0.1)
    with pytest.raises(ValueError, match="params"):
        optim.SGD([{"lr": 0.1}], lr=0.1)
    with pytest.raises(ValueError):
        optim.SGD([lin.weight, lin.weight], lr=0.1)  # one tensor twice
    with pytest.raises(TypeError, match="only optimize Tensors"):
        optim.SGD([1.0], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors or dicts"):
        optim.SGD(lin.weight, lr=0.1)  # a lone tensor, as PyTorch refuses it
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam(iter([]))
    with pytest.raises(ValueError):
        optim.Adam(lin.parameters(), amsgrad=True)
    with pytest.raises(ValueError):
        optim.Adam(lin.parameters(), lr=-1.0)


def test_zero_grad_and_step_skips_parameters_without_grad():
    p, q = nn.Parameter(ag.ones(2)), nn.Parameter(ag.ones(2))
    opt = optim.SGD([p, q], lr=1.0)
    p.grad = ag.ones(2)
    opt.step()
    np.testing.assert_array_equal(a(p), [0.0, 0.0])
    np.testing.assert_array_equal(a(q), [1.0, 1.0])  # no gradient: not moved
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a(p.grad), [0.0, 0.0])
    opt.zero_grad()
    assert p.grad is None
    assert opt.step(lambda: 3.5) == 3.5  # PyTorch's closure: its loss is returned


def test_state_dict_round_trip_continues_exactly():
    values, grads = params_and_grads(2)
    params, opt = run(lambda ps: optim.Adam(ps, lr=0.01), values, grads[:2])
    sd = opt.state_dict()
    assert sd["type"] == "Adam" and sd["param_groups"][0]["params"] == [0, 1]
    assert sd["param_groups"][0]["betas"] == (0.9, 0.999)
    assert sd["state"][0]["step"] == 2 and sd["state"][1]["exp_avg"].shape == (2, 2)
    # A copy of the parameters and a fresh optimizer loaded from the state dict take the same step.
    copies = [nn.Parameter(ag.tensor(a(p))) for p in params]
    fresh = optim.Adam(copies, lr=0.5)
    fresh.load_state_dict(sd)
    assert fresh.param_groups[0]["lr"] == 0.01
    for ps, o in ((params, opt), (copies, fresh)):
        for p, g in zip(ps, grads[2]):
            p.grad = ag.tensor(g)
        o.step()
    for p, c in zip(params, copies):
        np.testing.assert_array_equal(a(p), a(c))
    sgd_sd = optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True).state_dict()
    assert sgd_sd["param_groups"][0]["nesterov"] is True


def test_load_state_dict_errors():
    p = [nn.Parameter(ag.ones(3))]
    adam = optim.Adam(p)
    p[0].grad = ag.ones(3)
    adam.step()
    sd = adam.state_dict()
    with pytest.raises(ag.StateDictError):
        optim.SGD(p, lr=0.1).load_state_dict(sd)  # another type
    other = optim.Adam([nn.Parameter(ag.ones(4))])
    with pytest.raises(ag.StateDictError, match="exp_avg"):
        other.load_state_dict(sd)  # state tensors of another shape
    with pytest.raises(ValueError):
        adam.load_state_dict({"state": {}})


# ---- schedulers ---------------------------------------------------------------------------------


def make_sgd(lr=1.0, groups=1):
    return optim.SGD([{"params": [nn.Parameter(ag.ones(1))]} for _ in range(groups)], lr=lr)


def lrs(opt, scheduler, steps):
    out = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        scheduler.step()
        out.append(opt.param_groups[0]["lr"])
    return out


def test_lambda_lr():
    opt = make_sgd(0.1, groups=2)
    scheduler = optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5**epoch)
    np.testing.assert_allclose(lrs(opt, scheduler, 4), [0.1 * 0.5**e for e in range(5)])
    assert scheduler.last_epoch == 4 and scheduler.get_last_lr() == [0.1 * 0.5**4] * 2
    state = scheduler.state_dict()
    opt2 = make_sgd(0.1)
    again = optim.lr_scheduler.LambdaLR(opt2, lambda epoch: 0.5**epoch)
    again.load_state_dict(state)
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**4)


def test_step_lr():
    opt = make_sgd(1.0)
    scheduler = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
    np.testing.assert_allclose(lrs(opt, scheduler, 5), [1, 1, 0.1, 0.1, 0.01, 0.01])


def test_ags_schedules():
    opt = make_sgd(2.0)
    scheduler = optim.lr_scheduler.CosineWithWarmupLR(opt, warmup=2, total=6, min_factor=0.1)
    got = lrs(opt, scheduler, 7)

    def f(t):  # optim/schedule.h's formula
        if t <= 2:
            return t / 2
        if t >= 6:
            return 0.1
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (t - 2) / 4))

    np.testing.assert_allclose(got, [2.0 * f(t) for t in range(1, 9)], rtol=1e-6)
    schedule = optim.transformer_schedule(d_model=512, warmup=4000)
    assert schedule(1) == pytest.approx(512**-0.5 * 4000**-1.5)
    opt = make_sgd(1.0)
    optim.lr_scheduler.TransformerLR(opt, 512, 4000)
    assert opt.param_groups[0]["lr"] == pytest.approx(schedule(1))
    assert optim.step_decay(3, 0.5)(4) == 0.5
    # Any Python callable of t = 1, 2, ...
    opt = make_sgd(1.0)
    custom = optim.lr_scheduler.Scheduler(opt, lambda t: 1.0 / t)
    assert lrs(opt, custom, 2) == [1.0, 0.5, pytest.approx(1 / 3)]
    import ag.optim.lr_scheduler as lr_scheduler

    assert lr_scheduler.StepLR is optim.lr_scheduler.StepLR


def test_scheduler_errors_reach_python():
    opt = make_sgd(1.0)

    def broken(epoch):
        raise RuntimeError("from the schedule")

    with pytest.raises(RuntimeError, match="from the schedule"):
        optim.lr_scheduler.LambdaLR(opt, broken)
    with pytest.raises(ValueError):
        optim.lr_scheduler.StepLR(opt, 2, last_epoch=3)
