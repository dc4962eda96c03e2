"""Intervals the experiment reports share (imported by the scripts beside it)."""
from __future__ import annotations

import numpy as np


def ci90(values) -> tuple[float, float, float]:
    """Mean and a 90 % percentile-bootstrap interval (two-sided) of the mean."""
    from scipy.stats import bootstrap
    r = np.asarray(values, dtype=float)
    if r.size < 2 or np.all(r == r[0]):
        return float(r.mean()), float(r.mean()), float(r.mean())
    res = bootstrap((r,), np.mean, confidence_level=0.9, n_resamples=10000, method="percentile",
                    random_state=np.random.default_rng(0))
    return float(r.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high)
