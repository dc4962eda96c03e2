"""Parametric tuning: CMA-ES over a mechanism's normalized parameters.

The search only proposes; the agent loop evaluates each candidate with one submit
on the episode indices its Loop Policy prescribes and feeds the agent's score back.
With `edit_granularity = function` the parameters of one program function (a
`Param.group`) move per generation, rotating through the groups; otherwise all move.
"""
from __future__ import annotations

import warnings

import cma
import numpy as np

from ole.agents.builtin.mechanism import Mechanism

MIN_SIGMA = 1e-3
"""Step size below which a search restarts at the incumbent with the initial step."""


class Search:
    """Ask/tell CMA-ES in normalized coordinates (0 = the mechanism's defaults)."""

    def __init__(self, mech: Mechanism, center: np.ndarray, *, sigma: float, population: int,
                 granularity: str, seed: int) -> None:
        self.mech = mech
        self.center = np.asarray(center, dtype=float).copy()
        self.sigma0 = sigma
        self.population = population
        self.seed = seed
        groups = mech.groups() if granularity == "function" else ("*",)
        self.masks = [np.ones(mech.dim, bool) if g == "*" else mech.group_mask(g) for g in groups]
        self.turn = 0
        self.es = self._start(self.masks[0], sigma)
        self.pending: list[np.ndarray] = []

    def _start(self, mask: np.ndarray, sigma: float) -> cma.CMAEvolutionStrategy:
        x0 = self.center[mask]
        if x0.size < 2:
            x0 = np.concatenate([x0, np.zeros(2 - x0.size)])
        opts = {"popsize": self.population, "seed": self.seed + 1 + self.turn, "verbose": -9,
                "CMA_diagonal": x0.size > 64}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cma.CMAEvolutionStrategy(list(x0), sigma, opts)

    @property
    def mask(self) -> np.ndarray:
        return self.masks[self.turn % len(self.masks)]

    def ask(self) -> list[np.ndarray]:
        """One generation of full parameter vectors."""
        mask = self.mask
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.pending = [np.asarray(z, dtype=float) for z in self.es.ask()]
        out = []
        for z in self.pending:
            x = self.center.copy()
            x[mask] = z[: int(mask.sum())]
            out.append(x)
        return out

    def tell(self, scores: list[float]) -> None:
        """Scores of the last `ask()` (higher is better; failures as -inf).

        Ignored when the search was recentered since that `ask()` (the generation is void).
        """
        if len(scores) != len(self.pending):
            return
        finite = [s for s in scores if np.isfinite(s)]
        floor = (min(finite) - 1.0) if finite else 0.0
        losses = [-(s if np.isfinite(s) else floor) for s in scores]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.es.tell(self.pending, losses)
        if len(self.masks) > 1:  # the group's new mean stays when the next group takes its turn
            self.center[self.mask] = np.asarray(self.es.mean)[: int(self.mask.sum())]
            self.turn += 1
            self.es = self._start(self.mask, self.es.sigma)
        elif self.es.sigma < MIN_SIGMA:
            self.es = self._start(self.mask, self.sigma0)

    def scale_step(self, factor: float) -> None:
        self.es.sigma = float(np.clip(self.es.sigma * factor, MIN_SIGMA, 10.0))

    def recenter(self, center: np.ndarray, sigma: float | None = None, *, keep_shape: bool = False) -> None:
        """Move the search to a new centre (a revert, or a widened restart).

        `keep_shape` keeps CMA-ES's step size and covariance and moves only its mean (the
        next generation is sampled around `center`); otherwise CMA-ES restarts there with
        step `sigma` (default: the initial step). A pending generation is void either way.
        """
        self.center = np.asarray(center, dtype=float).copy()
        if keep_shape:
            z = self.center[self.mask]
            if z.size < 2:
                z = np.concatenate([z, np.zeros(2 - z.size)])
            self.es.mean = np.asarray(z, dtype=float)
        else:
            self.es = self._start(self.mask, sigma if sigma is not None else self.sigma0)
        self.pending = []

    @property
    def sigma(self) -> float:
        return float(self.es.sigma)
