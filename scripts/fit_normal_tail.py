#!/usr/bin/python3
"""The rational fit behind float32 GELU's normal tail (autograd/detail/vector_math_kernels.h).

    Φ(−a) = e^(−a²/2) · g(a),   g(a) = ½ erfcx(a/√2) = Φ(−a) e^(a²/2),   a = |x| ≥ 0

g is Mills' ratio over √(2π): smooth, ½ at a = 0 and ~ 1/(a √(2π)) for large a, so a rational
P(a)/Q(a) with deg Q = deg P + 1 follows it over the whole range where float32 GELU is not zero
(a ≤ 14.6: beyond, e^(−a²/2) underflows). This fits P of degree 4 and Q of degree 5 (Q(0) = 1) for
the least maximum relative error: Sanathanan–Koerner iterations (the linear problem P − g·Q = 0,
weighted by 1/(g·Q_previous)) with Lawson's reweighting towards the minimax solution. It prints the
coefficients rounded to float32 and their maximum relative error on a fine grid, evaluated exactly
(in double): the rounding of the float32 evaluation comes on top of it.

    /usr/bin/python3 scripts/fit_normal_tail.py        (numpy only; a few seconds)
"""
import math

import numpy as np

A_MAX = 14.6  # float32 GELU is 0 for x < −14.6
DEGREE = 5  # Q's degree; P's is one less


def g(a):
    z = a / math.sqrt(2.0)
    return 0.5 * math.exp(z * z) * math.erfc(z)  # relative error ~1e−14 for a ≤ 14.6


def fit(nodes=3000, iterations=200):
    k = np.arange(nodes)
    a = A_MAX / 2 * (1 - np.cos(np.pi * (k + 0.5) / nodes))  # Chebyshev nodes on [0, A_MAX]
    f = np.array([g(v) for v in a])
    q_previous = np.ones(nodes)
    weight = np.ones(nodes)
    best = None
    for iteration in range(iterations):
        # unknowns p_0 … p_{n−1}, q_1 … q_n:  P(a) − f·(Q(a) − 1) = f
        columns = [a**j for j in range(DEGREE)] + [-f * a**j for j in range(1, DEGREE + 1)]
        scale = np.sqrt(weight) / (f * q_previous)
        solution, *_ = np.linalg.lstsq(np.stack(columns, 1) * scale[:, None], f * scale, rcond=None)
        p = solution[:DEGREE]
        q = np.concatenate([[1.0], solution[DEGREE:]])
        q_previous = np.polyval(q[::-1], a)
        error = np.abs(np.polyval(p[::-1], a) / q_previous / f - 1)
        if best is None or error.max() < best[0]:
            best = (error.max(), p, q)
        if iteration >= 10:  # Lawson: weigh up where the error is largest
            weight = weight * error
            weight /= weight.sum()
    return best[1], best[2]


def main():
    p, q = fit()
    p32, q32 = p.astype(np.float32), q.astype(np.float32)
    a = np.linspace(0, A_MAX, 200001)
    f = np.array([g(v) for v in a])
    ratio = np.polyval(p32.astype(np.float64)[::-1], a) / np.polyval(q32.astype(np.float64)[::-1], a)
    error = np.abs(ratio / f - 1).max()
    print("P:", ", ".join("%.9g" % v for v in p32))
    print("Q:", ", ".join("%.9g" % v for v in q32))
    print("max relative error of P/Q on [0, %g], float32 coefficients, exact evaluation: %.3g"
          " (%.2f ulp of float32)" % (A_MAX, error, error / 2.0**-24))


if __name__ == "__main__":
    main()
