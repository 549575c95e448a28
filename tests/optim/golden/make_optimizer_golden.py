#!/usr/bin/python3
"""Writes optimizers.h5, the reference values of tests/optim/test_optimizer.cpp.

Regenerate (Debian's python3 with torch, numpy and h5py) from the top of the tree:

    /usr/bin/python3 tests/optim/golden/make_optimizer_golden.py

The output is the same on every run: the inputs come from a fixed seed.

Layout:
    /initial_params   float32 (P,)      the parameters before the first step
    /gradients        float32 (S, P)    the gradient of each step
    /learning_rates   float64 (S,)      the learning rate of each step
    /cases/<name>     float32 (S, P)    the parameters after each step; the attributes are the
                                        optimizer settings (the fields of OptimizerConfig)

sgd, momentum and nesterov come from torch.optim.SGD, whose semantics equal TF1's
(tf.train.GradientDescentOptimizer / MomentumOptimizer: a = m a + g; p -= lr a, and
p -= lr (g + m a) with use_nesterov). rmsprop and adam are written out here in float32 with
numpy because PyTorch's differ from TF1's: torch.optim.RMSprop starts the mean square at zero and
adds epsilon outside the root, torch.optim.Adam applies the bias corrections to m and v and adds
epsilon to sqrt(v_hat). TF1's RMSPropOptimizer starts the mean square at one with epsilon inside
the root; TF1's AdamOptimizer folds both corrections into the step size and adds epsilon to
sqrt(v) (the paper's "epsilon hat").
"""

import math
import os

import h5py
import numpy as np
import torch

PARAMETERS = 37
STEPS = 5
SEED = 20240607

DEFAULTS = dict(optimizer="sgd", weight_decay=0.0, momentum=0.9, nesterov=0,
                rmsprop_decay=0.9, rmsprop_momentum=0.0, rmsprop_epsilon=1e-10,
                adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8)

CASES = {
    "sgd": dict(optimizer="sgd"),
    "sgd_weight_decay": dict(optimizer="sgd", weight_decay=0.05),
    "momentum": dict(optimizer="momentum", momentum=0.9),
    "nesterov": dict(optimizer="momentum", momentum=0.9, nesterov=1, weight_decay=0.01),
    "rmsprop": dict(optimizer="rmsprop"),
    "rmsprop_momentum": dict(optimizer="rmsprop", rmsprop_decay=0.8, rmsprop_momentum=0.5,
                             rmsprop_epsilon=1e-3, weight_decay=0.01),
    "adam": dict(optimizer="adam"),
    "adam_weight_decay": dict(optimizer="adam", adam_beta1=0.8, adam_beta2=0.99,
                              adam_epsilon=1e-3, weight_decay=0.02),
}


def f32(value):
    return np.float32(value)


def decayed(grad, params, settings):
    """The L2 weight decay term added to the gradient, in float32 as the C++ code does it."""
    return grad + f32(settings["weight_decay"]) * params


def run_torch_sgd(initial, gradients, learning_rates, settings):
    param = torch.nn.Parameter(torch.from_numpy(initial.copy()))
    momentum = settings["momentum"] if settings["optimizer"] == "momentum" else 0.0
    optimizer = torch.optim.SGD([param], lr=learning_rates[0], momentum=momentum,
                                nesterov=bool(settings["nesterov"]),
                                weight_decay=settings["weight_decay"])
    after = []
    for grad, lr in zip(gradients, learning_rates):
        for group in optimizer.param_groups:
            group["lr"] = float(lr)
        param.grad = torch.from_numpy(grad.copy())
        optimizer.step()
        after.append(param.detach().numpy().copy())
    return after


def run_tf1_rmsprop(initial, gradients, learning_rates, settings):
    params = initial.copy()
    ms = np.ones_like(params)  # TF1 initialises the mean square to one
    mom = np.zeros_like(params)
    decay = f32(settings["rmsprop_decay"])
    one_minus_decay = f32(1.0 - settings["rmsprop_decay"])
    mu = f32(settings["rmsprop_momentum"])
    epsilon = f32(settings["rmsprop_epsilon"])
    after = []
    for grad, lr in zip(gradients, learning_rates):
        g = decayed(grad, params, settings)
        ms = decay * ms + one_minus_decay * (g * g)
        mom = mu * mom + f32(lr) * g / np.sqrt(ms + epsilon)
        params = params - mom
        after.append(params.copy())
    return after


def run_tf1_adam(initial, gradients, learning_rates, settings):
    params = initial.copy()
    m = np.zeros_like(params)
    v = np.zeros_like(params)
    beta1, beta2 = settings["adam_beta1"], settings["adam_beta2"]
    epsilon = f32(settings["adam_epsilon"])
    after = []
    for t, (grad, lr) in enumerate(zip(gradients, learning_rates), start=1):
        # The bias corrections in double, then one float step size.
        lr_t = f32(lr * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t))
        g = decayed(grad, params, settings)
        m = f32(beta1) * m + f32(1.0 - beta1) * g
        v = f32(beta2) * v + f32(1.0 - beta2) * (g * g)
        params = params - lr_t * m / (np.sqrt(v) + epsilon)
        after.append(params.copy())
    return after


RUNNERS = {"sgd": run_torch_sgd, "momentum": run_torch_sgd, "rmsprop": run_tf1_rmsprop,
           "adam": run_tf1_adam}


def cross_check_with_torch(initial, gradients):
    """The TF1 formulas above agree with PyTorch's where the two differ only by epsilon.

    With a negligible epsilon, a constant learning rate and PyTorch's mean square seeded with
    ones, torch.optim.RMSprop and torch.optim.Adam compute the same steps; this guards the
    hand-written formulas (bias corrections, where lr enters) against slips.
    """
    lr = 0.01
    learning_rates = [lr] * len(gradients)
    tiny = 1e-30

    settings = dict(DEFAULTS, optimizer="adam", adam_epsilon=tiny)
    ours = run_tf1_adam(initial, gradients, learning_rates, settings)
    param = torch.nn.Parameter(torch.from_numpy(initial.copy()))
    adam = torch.optim.Adam([param], lr=lr, betas=(0.9, 0.999), eps=tiny)
    for grad, expected in zip(gradients, ours):
        param.grad = torch.from_numpy(grad.copy())
        adam.step()
        np.testing.assert_allclose(param.detach().numpy(), expected, rtol=1e-5, atol=1e-6)

    settings = dict(DEFAULTS, optimizer="rmsprop", rmsprop_momentum=0.5, rmsprop_epsilon=tiny)
    ours = run_tf1_rmsprop(initial, gradients, learning_rates, settings)
    param = torch.nn.Parameter(torch.from_numpy(initial.copy()))
    rmsprop = torch.optim.RMSprop([param], lr=lr, alpha=0.9, eps=tiny, momentum=0.5)
    rmsprop.state[param] = {"step": torch.tensor(0.0), "square_avg": torch.ones_like(param),
                            "momentum_buffer": torch.zeros_like(param)}
    for grad, expected in zip(gradients, ours):
        param.grad = torch.from_numpy(grad.copy())
        rmsprop.step()
        np.testing.assert_allclose(param.detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def main():
    rng = np.random.default_rng(SEED)
    initial = rng.standard_normal(PARAMETERS).astype(np.float32)
    # Gradients of varied scale, so the adaptive optimizers' per-element step sizes differ.
    scales = np.exp(rng.uniform(-3.0, 1.0, size=(1, PARAMETERS)))
    gradients = (rng.standard_normal((STEPS, PARAMETERS)) * scales).astype(np.float32)
    learning_rates = np.array([0.1, 0.05, 0.08, 0.02, 0.03], dtype=np.float64)
    assert learning_rates.shape == (STEPS,)
    cross_check_with_torch(initial, gradients)

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optimizers.h5")
    temporary = path + ".tmp"
    with h5py.File(temporary, "w", track_order=False) as out:
        out.attrs["generator"] = "tests/optim/golden/make_optimizer_golden.py"
        out.attrs["torch_version"] = str(torch.__version__)
        out.create_dataset("initial_params", data=initial)
        out.create_dataset("gradients", data=gradients)
        out.create_dataset("learning_rates", data=learning_rates)
        cases = out.create_group("cases")
        for name, overrides in CASES.items():
            settings = dict(DEFAULTS, **overrides)
            after = RUNNERS[settings["optimizer"]](initial, gradients, learning_rates, settings)
            dataset = cases.create_dataset(name, data=np.stack(after).astype(np.float32))
            for key, value in settings.items():
                dataset.attrs[key] = value
    os.replace(temporary, path)
    print(path)


if __name__ == "__main__":
    main()
