"""`ole evolve --track mlflow` against a real local MLflow file store (issue 20).

The evolve runs through the real CLI on the synthetic evaluator (`synthetic.fake_evaluate`, no
host); the store is read back with MLflow's own client: one run per evolve with the config as
params, per-generation and gate metrics, the bundles and the report as artifacts, and a status
that says how the evolve ended.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import ole.jobs as jobs
from ole.cli import main
from ole.extras import EXTRAS
from synthetic import fake_evaluate

pytest.importorskip("mlflow", reason="the mlflow extra is part of `dev`; make install puts it there")

PROJECT = Path(__file__).resolve().parents[2]
ENVS = ("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0")


def _evolve(tmp_path: Path, *extra: str) -> list[str]:
    root = tmp_path / "bundles"
    root.mkdir(exist_ok=True)
    shutil.copy(PROJECT / "bundles" / "coder.yaml", root / "coder.yaml")
    return ["--root", str(root), "evolve", "--mode", "offline", "--envs", *ENVS, "--budget", "8",
            "--search-pools", "101", "--gate-pools", "201,202,203", "--gate-budgets", "8", "--population", "4",
            "--generations", "2", "--seed", "1", "--workers", "1", "--workdir", str(tmp_path / "work"),
            "--traces", str(tmp_path / "traces"), "--json", *extra]


def _client(store: Path):
    from mlflow.tracking import MlflowClient
    return MlflowClient(tracking_uri=store.resolve().as_uri())


def _runs(store: Path):
    client = _client(store)
    experiment = client.get_experiment_by_name("ole-evolve")
    return client, client.search_runs([experiment.experiment_id]) if experiment else []


@pytest.mark.heavy
def test_an_evolve_is_one_mlflow_run_with_config_metrics_bundles_and_report(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(jobs, "run_job", fake_evaluate)
    monkeypatch.chdir(tmp_path)  # the default store is ./mlruns
    assert main(_evolve(tmp_path, "--track", "mlflow")) == 0
    summary = json.loads(capsys.readouterr().out)
    client, runs = _runs(tmp_path / "mlruns")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name.startswith("evolve-offline-acrobot+")
    params = run.data.params
    assert params["mode"] == "offline" and params["proposer"] == "builtin"
    assert params["config.suite.envs"] == ",".join(ENVS) and params["config.population"] == "4"
    assert params["config.gate_pools"] == "201,202,203" and params["config.generations"] == "2"
    best = client.get_metric_history(run.info.run_id, "search_best_mean_r")
    assert sorted(m.step for m in best) == [1, 2]  # one point per generation
    assert all(m.value <= max(b.value for b in best) for m in client.get_metric_history(run.info.run_id,
                                                                                      "search_mean_mean_r"))
    gated = [g for g in summary["gates"]]
    assert gated, summary
    gate_r = client.get_metric_history(run.info.run_id, "gate_mean_r")
    assert [round(m.value, 9) for m in gate_r] == [round(g["gain"]["mean_r"], 9) for g in gated]
    accepted = client.get_metric_history(run.info.run_id, "gate_accepted")
    assert [m.value for m in accepted] == [1.0 if g["verdict"] == "release" else 0.0 for g in gated]
    assert run.data.metrics["spent_episodes"] == summary["spent"]["episodes"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {"bundles", "report", "summary.json"}
    bundles = {a.path for a in client.list_artifacts(run.info.run_id, "bundles")}
    assert {f"bundles/{ref.replace('@', '-')}.yaml" for ref in summary["candidates"]} <= bundles
    assert "bundles/coder-1.yaml" in bundles
    assert "report/index.html" in {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    local = Path(client.download_artifacts(run.info.run_id, "bundles/coder-1.yaml", str(tmp_path)))
    assert "format: ole-bundle-export" in local.read_text()  # importable elsewhere (`ole bundle import`)


def test_a_failed_evolve_is_a_failed_run(tmp_path, capsys, monkeypatch):
    def broken(job):
        raise RuntimeError("the evaluator broke")
    monkeypatch.setattr(jobs, "run_job", broken)
    store = tmp_path / "elsewhere"
    code = main(_evolve(tmp_path, "--track", "mlflow", "--track-uri", store.resolve().as_uri()))
    assert code == 1 and "the evaluator broke" in capsys.readouterr().err
    _, runs = _runs(store)
    assert [r.info.status for r in runs] == ["FAILED"]


def test_tracking_flags_are_checked_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(EXTRAS, "mlflow", "mlflow_is_not_installed_here")
    assert main(_evolve(tmp_path, "--track", "mlflow")) == 2
    assert "install the `mlflow` extra: pip install 'mlflow-skinny<4,>=3.0'" in capsys.readouterr().err
    assert main(_evolve(tmp_path, "--track-uri", "file:///tmp/x")) == 2
    assert "--track-uri names where --track logs" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()
