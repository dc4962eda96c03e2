"""Experiment tracking: one evolve, sent to the tool its users watch (MLflow).

`ole evolve --track mlflow` opens one MLflow run before any work starts and closes it when
the evolve ends (FINISHED, or FAILED / KILLED when it raised or was interrupted, so a crashed
evolve is visible as such). What is logged is what the evolve already computed, never a
second summary of it:

- params: the mode, the proposer, the workload and every `EvolveConfig` field (dotted names);
- metrics: per generation (step = generation) the best and mean search score (mean r against
  the champion) of the generation's candidates and how many there were; per gate decision
  (step = its order) mean r, its interval, pairs, win rate, p-value and released 0/1; the
  episodes and wall seconds spent;
- artifacts: `bundles/` (each candidate, released version and the champion as `ole bundle
  export` YAML), `report/` (the static HTML report of the run, `ole report`), `summary.json`
  (what `ole evolve --json` prints).

Per-generation scores and gate statistics come from the same `ole.report.collect` data the
report renders. The store is `--track-uri`, else `$MLFLOW_TRACKING_URI`, else a local file
store `./mlruns` (view it with `mlflow ui --backend-store-uri ./mlruns`). MLflow 3 keeps the
file store in maintenance mode and refuses it unless `MLFLOW_ALLOW_FILE_STORE` is set; it
is set only when that store is the one in use. The experiment is `$MLFLOW_EXPERIMENT_NAME`,
else `ole-evolve`.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from ole import dotted

TRACKERS = ("mlflow",)
DEFAULT_STORE = "mlruns"
"""Local file store used when no URI is given (relative to the current directory)."""
DEFAULT_EXPERIMENT = "ole-evolve"
MAX_PARAM_CHARS = 500
"""Longest parameter value sent (MLflow's own limit is larger; a long list is cut, and says so)."""


def tracking_uri(given: str | None) -> str:
    """`given`, else `$MLFLOW_TRACKING_URI`, else the local file store `./mlruns` (as a file: URI)."""
    uri = given or os.environ.get("MLFLOW_TRACKING_URI")
    return uri or Path(DEFAULT_STORE).resolve().as_uri()


def flatten(doc: object, prefix: str = "") -> dict[str, str]:
    """Dotted names -> text values, for params (`suite.envs` -> `gym/acrobot,gym/pusher5`)."""
    out: dict[str, str] = {}
    for name, value in dotted.flatten(doc, prefix).items():
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        out[name] = text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 12] + "…(truncated)"
    return out


def generation_metrics(versions) -> list[tuple[str, float, int]]:
    """(key, value, generation) for each generation's candidates with a search score."""
    from ole.report.charts import search_score
    by_gen: dict[int, list[float]] = {}
    for v in versions:
        score = search_score(v) if v.parents else None
        if score is not None:
            by_gen.setdefault(v.generation, []).append(score)
    out = []
    for gen, scores in sorted(by_gen.items()):
        out += [("search_best_mean_r", max(scores), gen), ("search_mean_mean_r", sum(scores) / len(scores), gen),
                ("search_candidates", float(len(scores)), gen)]
    return out


def gate_metrics(gates) -> list[tuple[str, float, int]]:
    """(key, value, order) for each gate decision: mean r, interval, pairs, win rate, p-value, and
    `gate_accepted` (1 for a `release` verdict, 0 otherwise; the metric keeps its first name)."""
    out = []
    for step, g in enumerate(sorted(gates, key=lambda g: g.seq)):
        values = {"gate_mean_r": g.interval.mean_r, "gate_ci_low": g.interval.low, "gate_ci_high": g.interval.high,
                  "gate_n_pairs": float(len(g.pairs)), "gate_win_rate": g.win_rate, "gate_p_value": g.p_value,
                  "gate_accepted": 1.0 if g.released else 0.0}
        out += [(k, float(v), step) for k, v in values.items() if v is not None]
    return out


def refs_of(summary: dict) -> set[str]:
    """The versions an evolve made or judged, from its summary (`ole evolve --json`)."""
    refs = set(summary.get("candidates") or ())
    refs |= {g["final"] for g in summary.get("gates") or () if g.get("final")}
    refs |= {d["challenger"] for d in summary.get("decisions") or ()}
    refs |= set(summary.get("releases") or ())
    return refs


class MlflowTracker:
    """One MLflow run (through `MlflowClient`, no global active run): params now, the rest at `finish`."""

    def __init__(self, uri: str | None, run_name: str, tags: dict[str, str]) -> None:
        from ole.extras import require
        self.uri = tracking_uri(uri)
        if self.uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # our default store: see the module docstring
        mlflow = require("mlflow", "--track mlflow")
        from mlflow.tracking import MlflowClient
        self.client = MlflowClient(tracking_uri=self.uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(name)
        self.run_id = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags).info.run_id
        self._entities = mlflow.entities

    def log_params(self, params: dict[str, str]) -> None:
        items = [self._entities.Param(k, v) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log_metrics(self, rows: list[tuple[str, float, int]]) -> None:
        now = int(time.time() * 1000)
        items = [self._entities.Metric(k, v, now, step) for k, v, step in rows]
        for i in range(0, len(items), 1000):
            self.client.log_batch(self.run_id, metrics=items[i:i + 1000])

    def log_folder(self, folder: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifacts(self.run_id, str(folder), artifact_path)

    def finish(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status)


def record_evolve(tracker: MlflowTracker, registry, summary: dict, workdirs: list[Path]) -> None:
    """Metrics and artifacts of a finished evolve (`summary` is what `ole evolve --json` prints)."""
    from ole.exchange import export_document
    from ole.report import build_report
    with tempfile.TemporaryDirectory(prefix="ole-track-") as tmp:
        data, _ = build_report(registry, [w for w in workdirs if w.is_dir()], Path(tmp) / "report")
        refs = refs_of(summary)
        mine = [v for v in data.versions if v.ref in refs]
        rows = generation_metrics(mine) + gate_metrics([g for g in data.gates if g.challenger in refs])
        spent = summary.get("spent") or {}
        rows += [(f"spent_{k}", float(spent[k]), 0) for k in ("episodes", "wall_s") if spent.get(k) is not None]
        tracker.log_metrics(rows)
        bundles = Path(tmp) / "bundles"
        bundles.mkdir()
        for ref in sorted(refs | {summary.get("champion") or "", summary.get("active") or ""} - {""}):
            _, text = export_document(registry, ref)
            (bundles / f"{ref.replace('@', '-')}.yaml").write_text(text, encoding="utf-8")
        (Path(tmp) / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
        tracker.log_folder(bundles, "bundles")
        tracker.log_folder(Path(tmp) / "report", "report")
        tracker.client.log_artifact(tracker.run_id, str(Path(tmp) / "summary.json"))


@contextmanager
def track(kind: str | None, *, uri: str | None, mode: str, envs: tuple[str, ...], params: dict,
          tags: dict[str, str]) -> Iterator[MlflowTracker | None]:
    """Open the tracker `kind` (None: no tracking) around an evolve; its status follows how it ended."""
    if kind is None:
        yield None
        return
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"evolve-{mode}-{'+'.join(e.split('/')[-1] for e in envs)}-{stamp}"
    tracker = MlflowTracker(uri, name, tags)
    tracker.log_params(flatten(params))
    try:
        yield tracker
    except KeyboardInterrupt:
        tracker.finish("KILLED")
        raise
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish("FINISHED")
