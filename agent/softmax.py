"""Softmax classifiers in numpy: the forward pass and one full-batch Adam trainer.

The offline mode router (agent/routing/train.py) and the offline turn classifier
(interventions/classifier.py) are both fit by `fit_adam`, so a fix to the trainer reaches both.
A classifier is a list of (weights, bias) layers with ReLU between them: one layer is softmax
regression, two are a one-hidden-layer MLP. Training code only; numpy is the local extra's.
"""

from __future__ import annotations

import numpy as np

Layer = tuple[np.ndarray, np.ndarray]
"""(weights (inputs, outputs), bias (outputs,)) of one layer."""

_BETA1, _BETA2, _EPS = 0.9, 0.999, 1e-8


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of logits (n, k)."""
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def forward(layers: list[Layer], x: np.ndarray) -> list[np.ndarray]:
    """Activations per layer, the input first: hidden layers after ReLU, the last one as logits."""
    outs = [x]
    for i, (w, b) in enumerate(layers):
        z = outs[-1] @ w + b
        outs.append(np.maximum(z, 0.0) if i < len(layers) - 1 else z)
    return outs


def fit_adam(
    layers: list[Layer],
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    l2: float,
    sample_weight: np.ndarray | None = None,
    input_mask: np.ndarray | None = None,
) -> list[Layer]:
    """Minimise softmax cross-entropy of `layers` on rows x (n, d), integer labels y (n,), in place.

    l2: the gradient of the penalty is `l2 * w` (the loss gains l2/2 · ‖w‖²; biases are not
    penalised). sample_weight (n,): each row's weight in the loss, summing to 1; None weighs
    rows equally. input_mask (d,): 0 freezes the first layer's weights of that input column at
    their initial values, 1 trains them. Returns `layers`, whose arrays were updated.
    """
    n = x.shape[0]
    onehot = np.eye(layers[-1][0].shape[1])[y]
    params = [p for layer in layers for p in layer]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for step in range(1, epochs + 1):
        acts = forward(layers, x)
        error = softmax(acts[-1]) - onehot
        grad = error / n if sample_weight is None else error * sample_weight[:, None]
        grads: list[np.ndarray] = []
        for i in range(len(layers) - 1, -1, -1):
            w, _ = layers[i]
            gw = acts[i].T @ grad + l2 * w
            if i == 0 and input_mask is not None:
                gw = gw * input_mask[:, None]
            grads = [gw, grad.sum(axis=0), *grads]
            if i:
                grad = (grad @ w.T) * (acts[i] > 0)
        for j, (p, g) in enumerate(zip(params, grads, strict=True)):
            m[j] = _BETA1 * m[j] + (1 - _BETA1) * g
            v[j] = _BETA2 * v[j] + (1 - _BETA2) * g**2
            p -= lr * (m[j] / (1 - _BETA1**step)) / (np.sqrt(v[j] / (1 - _BETA2**step)) + _EPS)
    return layers
