"""The Gaussian process and expected improvement behind P4BS's search (seed 003 §IV-E,
eqs. (2)–(13)), as pure numpy: the objective, the GP posterior, EI and the next buffer on
the authors' 1.5 ms grid. The state machine that uses them is
:mod:`scidmz.control.buffer_search`."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

GRID_STEP_S = 0.0015
"""The authors' code: candidate buffers 1.5 ms apart."""
X_SCALE_S = 0.2
"""The code scales buffers by 200 ms before the GP sees them."""
RBF_LENGTH = 0.03525
GP_NOISE = 1.25e-4
EI_XI = 1e-5
SPREAD_FLOOR = 1e-3
"""The least spread of f the GP is scaled by (f's resolution: 0.1 % of its range)."""


def objective(
    loss: float,
    delay_s: float,
    loss_scale: float = 0.05,
    max_queue_delay_s: float = 0.2,
    w_loss: float = 0.5,
    w_delay: float = 0.5,
) -> float:
    """Eq. (2), f = −[w1·p/lossScale + w2·d/maxQueueDelay] (the code's normalisation)."""
    return -(w_loss * loss / loss_scale + w_delay * delay_s / max_queue_delay_s)


def rbf(a: FloatArray, b: FloatArray, length: float = RBF_LENGTH) -> FloatArray:
    """Eq. (5)'s kernel as scikit-learn computes it: exp(−|a − b|² / 2ℓ²)."""
    d = a[:, None] - b[None, :]
    kernel: FloatArray = np.exp(-0.5 * (d / length) ** 2)
    return kernel


def gp_posterior(
    x: FloatArray, y: FloatArray, grid: FloatArray, noise: float = GP_NOISE
) -> tuple[FloatArray, FloatArray]:
    """Eqs. (6)–(10): the posterior mean and standard deviation on ``grid`` of a zero-mean
    GP with the RBF kernel and ``noise`` on the diagonal, given observations ``(x, y)``
    (all in the scaled units)."""
    k = rbf(x, x) + noise * np.eye(x.shape[0])
    chol = np.linalg.cholesky(k)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    k_star = rbf(grid, x)
    mean: FloatArray = k_star @ alpha
    v = np.linalg.solve(chol, k_star.T)
    variance = np.maximum(1.0 - np.sum(v * v, axis=0), 0.0)
    return mean, np.sqrt(variance)


def _phi(z: FloatArray) -> FloatArray:
    density: FloatArray = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return density


def _cdf(z: FloatArray) -> FloatArray:
    erf = np.vectorize(math.erf)
    cumulative: FloatArray = 0.5 * (1.0 + erf(z / math.sqrt(2.0)))
    return cumulative


def expected_improvement(
    mean: FloatArray, std: FloatArray, best: float, xi: float = EI_XI
) -> FloatArray:
    """Eqs. (12)–(13) for a maximisation: E[max(f − f⁺ − ξ, 0)]; 0 where σ = 0."""
    improvement = mean - best - xi
    safe = np.where(std > 0, std, 1.0)
    z = improvement / safe
    ei = improvement * _cdf(z) + safe * _phi(z)
    result: FloatArray = np.where(std > 0, np.maximum(ei, 0.0), 0.0)
    return result


def next_buffer(
    tried_s: list[float],
    scores: list[float],
    low_s: float,
    high_s: float,
    noise: float = 0.0,
) -> tuple[float, float]:
    """Algorithm 2's step: the grid buffer in [low, high] with the largest EI given the
    trials so far, and that EI, in f's units. Ours: the GP sees f centred on the trials'
    mean and scaled by their spread, as scikit-learn's ``normalize_y`` does, the spread at
    least half the best f (f ≤ 0: no buffer can gain more than |f⁺|) and at least
    ``noise``, f's measured standard error. The authors' code fits f as it is with a prior
    of unit variance, so an unexplored buffer kept an EI of ~0.4 (f spans ~0.3) and EI
    never fell below any threshold the trials' noise could set."""
    grid_s = np.arange(low_s, high_s + GRID_STEP_S / 2, GRID_STEP_S)
    if grid_s.size == 0:
        grid_s = np.array([low_s])
    x = np.asarray(tried_s) / X_SCALE_S
    y = np.asarray(scores, dtype=float)
    centre = float(y.mean())
    spread = max(float(y.std()), abs(float(y.max())) / 2, noise, SPREAD_FLOOR)
    mean, std = gp_posterior(x, (y - centre) / spread, grid_s / X_SCALE_S)
    ei = expected_improvement(centre + spread * mean, spread * std, max(scores))
    best = int(np.argmax(ei))
    return float(grid_s[best]), float(ei[best])
