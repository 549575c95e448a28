#!/usr/bin/python3
"""Where the bounds of the parity suite at --precision tf32 and bf16 come from
(tests/backend/test_backend_parity.cpp): the op case conv_same_relu (a 3x9x7 input, a 3x3 SAME
convolution of 8 channels, ReLU, a dense layer of 3, softmax cross-entropy, a batch of 5) computed
in float64 with the roundings of each precision emulated (tf32: the operands of each product
rounded to a 10-bit mantissa; bf16: to 7 bits, and the convolutions' results too), against the
same in float64 without them, over many random draws. Prints the normalised error (the largest
difference over the tensor's scale, at least 1) of the forward tensors and of the gradients, in
units of the format's unit roundoff u. Not a test: run it by hand (numpy) when a bound is in
question.

    /usr/bin/python3 tests/gpu/emulate_precision.py [DRAWS]
"""

import sys

import numpy as np


def rounded(values, dropped_bits):
    """fp32 values rounded to nearest, ties to even, keeping 23 - dropped_bits mantissa bits."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    half = (1 << (dropped_bits - 1)) - 1
    kept = (bits + half + ((bits >> dropped_bits) & 1)) >> dropped_bits << dropped_bits
    return kept.astype(np.uint32).view(np.float32).astype(np.float64)


def exact(values):
    return np.asarray(values, dtype=np.float64)


def normalised_error(actual, reference):
    return np.max(np.abs(actual - reference)) / max(1.0, np.max(np.abs(reference)))


def conv_same_3x3(x, w):
    n, _, h, width = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, w.shape[0], h, width))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,kc->nkhw", padded[:, :, i:i + h, j:j + width], w[:, :, i, j])
    return y


def conv_same_relu(seed, operand, result):
    """Forward tensors and parameter gradients; operand/result round a product's inputs/output."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(5, 3, 9, 7))
    w1 = rng.normal(size=(8, 3, 3, 3)) * np.sqrt(2 / 27)
    w2 = rng.normal(size=(3, 8 * 9 * 7)) * np.sqrt(1 / (8 * 63))
    labels = np.arange(5) % 3
    y1 = result(conv_same_3x3(operand(x), operand(w1)))
    a1 = np.maximum(y1, 0)
    flat = a1.reshape(5, -1)
    z = operand(flat) @ operand(w2).T
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = p.copy()
    dz[np.arange(5), labels] -= 1
    dz /= 5
    dw2 = operand(dz).T @ operand(flat)
    dy1 = (operand(dz) @ operand(w2)).reshape(a1.shape) * (y1 > 0)
    padded = np.pad(operand(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
    dw1 = np.zeros_like(w1)
    for i in range(3):
        for j in range(3):
            dw1[:, :, i, j] = np.einsum("nkhw,nchw->kc", operand(dy1), padded[:, :, i:i + 9, j:j + 7])
    return [y1, a1, z], np.concatenate([result(dw1).ravel(), dw2.ravel()])


def main():
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    for name, dropped, rounds_results in (("tf32", 13, False), ("bf16", 16, True)):
        u = 2.0 ** -(24 - dropped)
        operand = lambda v, d=dropped: rounded(v, d)
        result = operand if rounds_results else exact
        forward, backward = [], []
        for seed in range(draws):
            ref_tensors, ref_grads = conv_same_relu(seed, exact, exact)
            tensors, grads = conv_same_relu(seed, operand, result)
            forward.append(max(normalised_error(a, r) for a, r in zip(tensors, ref_tensors)))
            backward.append(normalised_error(grads, ref_grads))
        for label, errors in (("forward", forward), ("gradients", backward)):
            p50, p99, worst = np.percentile(errors, [50, 99, 100])
            print(f"{name} {label:9}: median {p50 / u:6.1f}u  p99 {p99 / u:6.1f}u  "
                  f"max {worst / u:6.1f}u = {worst:.3g}")


if __name__ == "__main__":
    main()
