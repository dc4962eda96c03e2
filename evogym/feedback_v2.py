"""EvoPolicyGym main's agent-facing feedback (`evopolicygym/feedback/v2`), beside ours.

Upstream agents read `feedback/latest.json` and then the document it names; ours read
`feedback/submit_NNN/`. A session run (`--session`) writes both, from one evaluation:

```
workspace/feedback/latest.json                          the newest published submission
workspace/feedback/submissions/<submission-id>/feedback.json   its feedback/v2 document
workspace/feedback/submissions/<submission-id>/availability.json
workspace/feedback/submissions/<submission-id>/artifacts/...   files the env's feedback names
```

Submission ids are upstream's, `submission-NNNNNN`: the ordinal of a *published* submit (one
that was charged and not refunded), 1-based. They are a pure function of our summaries (a
submit is published when its `summary.json` counts episodes), so a resumed host names the
same submits the same way. Our `submit_NNN` names are accepted wherever an id is read.

The document's `score`, `content` and `artifacts` are the env's when its class defines
`evogym_feedback` (`evogym.envs.FEEDBACK_HOOK`, upstream's `Benchmark.feedback`); otherwise
`score` is the mean return (null when the policy never ran) and `content` summarizes it and
names our richer folder. Each episode is reported as upstream does: `completed` with its
reward, or `policy_failed` with a failure code (`FAILURE`) and no reward; an episode in which
the policy returned an invalid action is `invalid_action` (the host coerced that action and
played on, docs/protocol-deviations.md #27).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from evogym.durable import SUMMARY_MAX_BYTES, read_regular
from evogym.feedback import atomic_write_bytes

SCHEMA = "evopolicygym/feedback/v2"
AVAILABILITY_SCHEMA = "evopolicygym/artifact-availability/v1"
SUBMISSIONS = "submissions"
LATEST = "latest.json"
ID = re.compile(r"submission-([0-9]{6})")
SUBMIT = re.compile(r"submit_([0-9]{1,9})")
ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9][A-Za-z0-9._-]{0,127}){0,3}")
ARTIFACT_BYTES = 16 << 20
"""Most bytes of all artifacts of one submission (upstream's per-artifact limit)."""

FAILURE = {"act_timeout": "timeout", "init_timeout": "timeout", "protocol_error": "protocol_error",
           "policy_crashed": "protocol_error", "init_crashed": "protocol_error"}
"""Our episode category -> upstream's policy failure code; any other policy category is
`exception`. `env_error` is the environment's fault, never the policy's: that episode is
`completed` with the reward it had."""


class FeedbackError(Exception):
    """The env's own feedback (`evogym_feedback`) returned something that cannot be published."""


def submission_id(ordinal: int) -> str:
    return f"submission-{ordinal:06d}"


class Publications:
    """Which submit is which upstream submission: `submission-NNNNNN` <-> submit index."""

    def __init__(self, indices: list[int]) -> None:
        self.indices = list(indices)
        """Submit indices of the published submits, in order (ordinal = position + 1)."""

    @classmethod
    def recover(cls, feedback: Path) -> "Publications":
        """From our summaries: the submits that counted episodes, in index order."""
        found = []
        for folder in feedback.glob("submit_*"):
            match = SUBMIT.fullmatch(folder.name)
            try:
                summary = json.loads(read_regular(folder / "summary.json", SUMMARY_MAX_BYTES))
            except (OSError, ValueError, RecursionError):
                continue  # the agent's folder, or a submit the host died in (recorded on restart)
            if match and isinstance(summary, dict) and summary.get("n_episodes"):
                found.append(int(match.group(1)))
        return cls(sorted(found))

    def add(self, index: int) -> str:
        self.indices.append(index)
        return submission_id(len(self.indices))

    def name(self, index: int) -> str | None:
        return submission_id(self.indices.index(index) + 1) if index in self.indices else None

    def index_of(self, name: str) -> int | None:
        """The submit index an id names (`submission-NNNNNN`, or our `submit_NNN`), None if none."""
        match = ID.fullmatch(name)
        if match:
            ordinal = int(match.group(1))
            return self.indices[ordinal - 1] if 1 <= ordinal <= len(self.indices) else None
        match = SUBMIT.fullmatch(name)
        return int(match.group(1)) if match and int(match.group(1)) in self.indices else None


def episode_docs(indices: list[int], outcomes: list[dict] | None, verdict: str) -> list[dict]:
    """One upstream episode summary per requested id. `outcomes`: per episode `ret`, `length`,
    `category` (our episode error, or None) and `invalid` (an invalid action was coerced); None
    when the policy never ran (the submit's `verdict` then fails every episode)."""
    if outcomes is None:
        failure = "timeout" if verdict == "rollout_timeout" else "exception"
        return [{"episode_index": i, "status": "policy_failed", "reward": None, "steps": 0, "failure": failure}
                for i in indices]
    docs = []
    for i, out in zip(indices, outcomes):
        category = out["category"] if out["category"] != "env_error" else None
        code = FAILURE.get(category, "exception") if category else "invalid_action" if out["invalid"] else None
        docs.append({"episode_index": i, "status": "policy_failed" if code else "completed",
                     "reward": None if code else float(out["ret"]), "steps": int(out["length"]),
                     "failure": code, "return": float(out["ret"])})
    return docs


def default_feedback(summary: dict, episodes: list[dict], submit_name: str) -> dict:
    """The host's feedback for envs that define none: the mean return, and where ours is."""
    mean, n = summary.get("mean_return"), len(episodes)
    failures = sum(e["status"] == "policy_failed" for e in episodes)
    text = (f"Mean return {mean:.3f} across {n} Episodes." if mean is not None
            else f"The policy did not run ({summary.get('status')}); see {submit_name}/errors.txt.")
    return {"score": mean, "artifacts": [], "content": {
        "summary": text, "mean_return": mean, "mean_steps": summary.get("mean_episode_length"), "episodes": n,
        "policy_failures": failures, "verdict": summary.get("status"), "details": f"{submit_name}/"}}


def env_feedback(hook: Callable[[list[dict]], Any], episodes: list[dict]) -> dict:
    """The env's own feedback, checked: a finite `score`, JSON `content`, and artifacts with a
    safe relative `name`, a one-line `media_type` and `content` (str or bytes) within ARTIFACT_BYTES."""
    made = hook([dict(e) for e in episodes])
    if not isinstance(made, dict) or set(made) - {"score", "content", "artifacts"}:
        raise FeedbackError(f"evogym_feedback must return a dict of score, content, artifacts; got {made!r:.200}")
    score = made.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise FeedbackError(f"evogym_feedback's score must be a finite number, got {score!r:.100}")
    try:
        json.dumps(made.get("content"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise FeedbackError(f"evogym_feedback's content is not JSON: {exc}") from None
    artifacts, total = [], 0
    for item in made.get("artifacts") or []:
        name, media, content = item.get("name"), item.get("media_type"), item.get("content")
        data = content.encode("utf-8") if isinstance(content, str) else content
        if not (isinstance(name, str) and ARTIFACT_NAME.fullmatch(name) and ".." not in name.split("/")
                and isinstance(media, str) and media and "\n" not in media and isinstance(data, bytes)):
            raise FeedbackError(f"evogym_feedback artifact {str(name)[:80]!r} needs a safe name, a media_type "
                                "and str or bytes content")
        total += len(data)
        artifacts.append({"name": name, "media_type": media, "content": data})
    if total > ARTIFACT_BYTES or len({a["name"] for a in artifacts}) != len(artifacts):
        raise FeedbackError("evogym_feedback artifacts exceed 16 MiB or repeat a name")
    return {"score": float(score), "content": made.get("content"), "artifacts": artifacts}


def publish(feedback: Path, receipt: dict, episodes: list[dict], made: dict) -> None:
    """Write one submission's folder (assembled aside, renamed into place) and then
    `latest.json`. `receipt`: submission_id, program_digest, episode_indices, episodes_used,
    episodes_remaining; `made`: score, content, artifacts (`env_feedback`/`default_feedback`)."""
    sid = receipt["submission_id"]
    root = feedback / SUBMISSIONS
    root.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{sid}."))
    try:
        listed = []
        for art in made["artifacts"]:
            path = tmp / "artifacts" / art["name"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(art["content"])
            listed.append({"name": art["name"], "media_type": art["media_type"], "path": f"artifacts/{art['name']}",
                           "size": len(art["content"]), "sha256": hashlib.sha256(art["content"]).hexdigest(),
                           "retention": "permanent"})
        doc = {"schema": SCHEMA, **{k: receipt[k] for k in ("submission_id", "program_digest", "episode_indices",
                                                            "episodes_used", "episodes_remaining")},
               "score": made["score"], "content": made["content"], "artifacts": listed,
               "episodes": [{k: e[k] for k in ("episode_index", "status", "reward", "steps", "failure")}
                            for e in episodes]}
        _write(tmp / "feedback.json", doc)
        _write(tmp / "availability.json", {"schema": AVAILABILITY_SCHEMA, "submission_id": sid,
                                           "bulk_status": "available", "bulk_artifacts": []})
        tmp.chmod(0o755)
        tmp.rename(root / sid)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_bytes(feedback / LATEST, _encode({
        "schema": SCHEMA, "submission_id": sid, "program_digest": receipt["program_digest"], "score": made["score"],
        "feedback": f"{SUBMISSIONS}/{sid}/feedback.json"}))


def _encode(doc: dict) -> bytes:
    return (json.dumps(doc, allow_nan=False, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _write(path: Path, doc: dict) -> None:
    path.write_bytes(_encode(doc))
