#!/usr/bin/python3
"""The polynomial behind float32 log on AVX2 (autograd/vector_math_avx2.cpp).

    x = 2^e · m,  m in [√½, √2),  f = m − 1 in [√½ − 1, √2 − 1]  (exact in float32)
    log x = e·ln 2 + log(1 + f),   log(1 + f) = f − f²/2 + f³ · P(f)

P follows R(f) = (log(1 + f) − f + f²/2) / f³ (⅓ at f = 0). Its error reaches the result as
f³ · ΔP, against a result of about f (for e = 0): a relative f² · ΔP. This fits P of degree
DEGREE for the least maximum of that relative error: least squares on Chebyshev nodes with
Lawson's reweighting towards the minimax solution. It prints the coefficients rounded to float32,
highest first, and the maximum relative error of f − f²/2 + f³ · P32(f) against log(1 + f),
evaluated in double: the float32 evaluation's roundings come on top of it (the test in
tests/autograd/test_vector_math.cpp measures the whole function in ulps).

    /usr/bin/python3 scripts/fit_log.py        (numpy only; a second)
"""
import math

import numpy as np

F_LO, F_HI = math.sqrt(0.5) - 1, math.sqrt(2.0) - 1
DEGREE = 7


def target(f):
    """R(f) = (log1p(f) − f + f²/2) / f³, from its series where the difference cancels."""
    if abs(f) < 1e-3:
        return sum((-1) ** k * f**k / (k + 3) for k in range(12))
    return (math.log1p(f) - f + f * f / 2) / f**3


def fit(nodes=4000, iterations=300):
    k = np.arange(nodes)
    f = F_LO + (F_HI - F_LO) / 2 * (1 - np.cos(np.pi * (k + 0.5) / nodes))
    r = np.array([target(v) for v in f])
    scale_to_relative = f**3 / np.log1p(f)  # ΔP · f³ / log(1 + f): the result's relative error
    weight = np.ones(nodes)
    best = None
    for iteration in range(iterations):
        columns = np.stack([f**j for j in range(DEGREE + 1)], 1) * scale_to_relative[:, None]
        w = np.sqrt(weight)
        p, *_ = np.linalg.lstsq(columns * w[:, None], r * scale_to_relative * w, rcond=None)
        error = np.abs((np.polyval(p[::-1], f) - r) * scale_to_relative)
        if best is None or error.max() < best[0]:
            best = (error.max(), p)
        if iteration >= 10:  # Lawson: weigh up where the error is largest
            weight = weight * error
            weight /= weight.sum()
    return best[1]


def main():
    p = fit()
    p32 = p.astype(np.float32).astype(np.float64)
    f = np.linspace(F_LO, F_HI, 400001)
    f = f[f != 0]
    approx = f - f * f / 2 + f**3 * np.polyval(p32[::-1], f)
    error = np.abs(approx / np.log1p(f) - 1).max()
    print("P, highest first:", ", ".join("%.9g" % v for v in p32[::-1]))
    print("max relative error (double evaluation): %.3g" % error,
          "(float32's ulp, relative: 5.96e-08 to 1.19e-07)")


if __name__ == "__main__":
    main()
