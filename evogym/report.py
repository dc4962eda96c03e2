"""`evogym report RUN_DIR`: a human summary of a finished run (or JSON)."""
from __future__ import annotations

import json
from pathlib import Path

from evogym.errors import ConfigError


def load_run(run_dir: Path) -> dict:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no run.json", hint="the run is not finalized yet (see events.jsonl)")
    return json.loads(path.read_text())


def report(run_dir: Path, as_json: bool = False) -> str:
    doc = load_run(run_dir)
    out = doc["outcome"]
    aux = out.get("auxiliary") or {}
    if as_json:
        keep = {k: out.get(k) for k in ("status", "final_score", "normalized_score", "best_submit_index",
                                         "val_scores", "heldout_mean_return", "heldout_std_return")}
        keep.update({k: aux.get(k) for k in ("episodes_used", "n_submits", "n_successful_submits", "auc_in_loop",
                                             "episodes_to_50pct", "episodes_to_80pct", "held_out_gap",
                                             "val_heldout_gap", "edit_kinds")})
        return json.dumps({"env": doc["env"], "profile": doc.get("profile"), **keep}, indent=2, sort_keys=True)
    kinds = list((aux.get("edit_kinds") or {}).values())
    lines = [f"run      {Path(run_dir)}", f"env      {doc['env']}  profile {doc.get('profile')}  "
             f"isolation {doc.get('isolation', {}).get('level')}", f"status   {out['status']}"]
    if out["status"] == "completed":
        norm = out.get("normalized_score")
        lines += [f"score    {out['final_score']:.4g} (held-out mean over {len(out['heldout_returns'] or [])} episodes)"
                  + (f", normalized {norm:.1f}" if norm is not None else ""),
                  f"selected submit {out['best_submit_index']} "
                  f"(validation {out['val_scores'][str(out['best_submit_index'])]:.4g}; "
                  f"{len(out['val_scores'])} candidates)"]
    elif out.get("error"):
        lines.append(f"error    {out['error']['message']}")
    lines += [f"budget   {aux.get('episodes_used')} episodes in {aux.get('n_charged_submits')} charged submits "
              f"({aux.get('n_successful_submits')} ok)",
              f"edits    {kinds.count('synthesis')} synthesis, {kinds.count('tuning')} tuning, {kinds.count('none')} unchanged"]
    if aux.get("auc_in_loop") is not None:
        lines.append(f"curve    auc_in_loop {aux['auc_in_loop']:.1f}, episodes to 50% {aux.get('episodes_to_50pct')}, "
                     f"to 80% {aux.get('episodes_to_80pct')}")
    return "\n".join(lines)
