"""Float32 tolerances derived from what a test compares, so that they hold on every CPU's kernels.

Two computations that are equal in exact arithmetic still round differently: torch picks its
kernels by CPU (`ATEN_CPU_CAPABILITY`: default, avx2, avx512), and a padded batch, a microbatch or
a fused head sums in another order. Each bound below is a rounding-error bound in units of
float32's unit roundoff U, scaled by the number of terms and the magnitude of what is compared:
- an explicit sum of n terms, in any order, is within gamma(n - 1) * sum|t| of the exact sum
  (the worst case: Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 3.1);
- a network's output passes through many reductions one after another; for those the
  probabilistic bound LAMBDA * sqrt(K) * U for a reduction of K terms (Higham and Mary, SIAM J.
  Sci. Comput. 2019) is used, the independent errors along the path added as variances, since the
  worst case at that depth bounds nothing a test could check;
- weights rounded to a shorter format (an f16 export) move each matmul's output by about
  LAMBDA * u relative, whatever its length (independent relative errors of its terms).
A comparison of two computations doubles the bound (each one is off from the exact value).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

U = 2.0**-24  # float32 unit roundoff
U_F16 = 2.0**-11  # float16 unit roundoff: the GGUF f16 export stores weights in it
LAMBDA = 4.0  # the probabilistic bound's confidence factor; every reduction of a path counted in full


def gamma(n: int, unit: float = U) -> float:
    """The worst-case relative error of a sum or dot product of n + 1 terms."""
    return n * unit / (1 - n * unit)


def sum_tol(terms: Iterable[float]) -> float:
    """Two sums of `terms` in different orders: each within gamma(n-1) * sum|t| of the exact one."""
    values = [abs(float(t)) for t in terms]
    return 2 * gamma(max(len(values) - 1, 1)) * sum(values)


def transformer_reductions(config: object, positions: int) -> list[int]:
    """The lengths of the reductions an output logit goes through, one after another, in a
    Llama-style decoder: per layer the norm, q/k/v, attention scores and their softmax, the
    weighted values, o, the norm, gate/up and down; then the last norm, the head and the
    log-softmax over the vocabulary."""
    hidden = int(config.hidden_size)  # type: ignore[attr-defined]
    head_dim = hidden // int(config.num_attention_heads)  # type: ignore[attr-defined]
    inner = int(config.intermediate_size)  # type: ignore[attr-defined]
    layer = [hidden, hidden, head_dim, positions, positions, hidden, hidden, hidden, inner]
    layers = int(config.num_hidden_layers)  # type: ignore[attr-defined]
    return layer * layers + [hidden, hidden, int(config.vocab_size)]  # type: ignore[attr-defined]


def network_rel(reductions: Iterable[int]) -> float:
    """Relative error of one output of a chain of float32 reductions: LAMBDA sqrt(K) U each,
    independent, so their variances add."""
    return LAMBDA * U * math.sqrt(sum(reductions))


def rounded_weights_rel(matmuls: int, unit: float) -> float:
    """Relative error of an output after `matmuls` matmuls in a row whose weights were rounded to
    `unit`: LAMBDA * unit each, independent."""
    return LAMBDA * unit * math.sqrt(matmuls)


def grad_rel(config: object, positions: int, tokens: int) -> float:
    """Two computations of a LoRA gradient, relative to its norm: the backward pass runs the
    forward path's reductions again (transposed), and each weight's gradient sums over every
    token of the batch."""
    path = transformer_reductions(config, positions)
    return 2 * network_rel([*path, *path, tokens])


def logprob_tol(config: object, positions: int, magnitude: float) -> float:
    """Two computations of a model's log-probabilities (different batch shapes or kernels): the
    logits carry the network's relative error, the log-softmax's shift by max|logit| scales it."""
    return 2 * network_rel(transformer_reductions(config, positions)) * magnitude


def loss_tol(weights: Iterable[float], lp_tol: float) -> float:
    """A loss sum_i w_i * f(lp_i) whose terms move by at most |w_i| * lp_tol * e^{lp_tol} when
    each lp_i moves by lp_tol (f = exp for importance sampling, identity for cross-entropy; w_i
    the ratio times the advantage, or the weight), plus the sum's own reordering."""
    values = [abs(float(w)) for w in weights]
    return sum(values) * lp_tol * math.exp(lp_tol) + sum_tol(values)
