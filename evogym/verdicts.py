"""One vocabulary for everything that can go wrong, from a sandbox call up to a submit.

Three levels, each a `Literal`, and the two maps between them:

- a **call category** is what one call into the policy process reports
  (`CallResult.category`, `evogym.sandbox`);
- an **episode category** is what an episode records in `error.txt` and
  `summary.errors` (`evogym.rollout`);
- a **verdict** is a submit's `status` in `summary.json` (`evogym.judge`), the
  reference's `Verdict` names plus our `host_interrupted` (docs/protocol-deviations.md).

Every module that names a failure imports it from here, so a new category is added
in one place and the maps below say what it becomes at every level.
"""
from __future__ import annotations

from typing import Literal, get_args

CallCategory = Literal["missing_policy", "import_error", "init_error", "reset_error", "act_error",
                       "oom", "timeout", "crashed", "protocol_error"]
CALL_CATEGORIES: tuple[str, ...] = get_args(CallCategory)

FATAL: frozenset[str] = frozenset({"oom", "timeout", "crashed", "protocol_error"})
"""Call categories after which the policy process is dead; later calls repeat the failure."""

WORKER_CATEGORIES: dict[str, frozenset[str]] = {
    "prepare": frozenset(),  # a pre-started sandbox's preload runs no policy code and never fails
    "start": frozenset({"missing_policy", "import_error", "init_error", "oom"}),
    "reset": frozenset({"reset_error", "oom"}),
    "act": frozenset({"act_error", "oom"}),
}
"""Categories the in-sandbox worker may report per request; any other is a forged frame."""

EpisodeCategory = Literal["missing_policy", "import_error", "init_error", "init_timeout", "init_crashed",
                          "reset_error", "act_error", "act_timeout", "policy_crashed", "oom",
                          "protocol_error", "env_error"]
EPISODE_CATEGORIES: tuple[str, ...] = get_args(EpisodeCategory)

EPISODE_CATEGORY: dict[str, str] = {
    "timeout": "act_timeout", "crashed": "policy_crashed",
    "oom": "oom", "protocol_error": "protocol_error",
}
"""Fatal call category during an episode -> the episode's category (the episode ends there)."""

SubmitVerdict = Literal["ok", "budget_invalid", "invalid_env_instance", "missing_policy", "denied_import",
                  "import_error", "init_timeout", "init_error", "oom", "rollout_timeout",
                  "host_interrupted"]
VERDICTS: tuple[str, ...] = get_args(SubmitVerdict)

REJECTED: frozenset[str] = frozenset({"budget_invalid", "invalid_env_instance"})
"""Phase-1 verdicts: free, no checkpoint (as the reference's `Verdict.rejected`)."""

START_VERDICT: dict[str, str] = {
    "missing_policy": "missing_policy", "import_error": "import_error", "init_error": "init_error",
    "oom": "oom", "timeout": "init_error", "crashed": "init_error", "protocol_error": "init_error",
}
"""Failed start (import + `Policy(...)`) call category -> the submit verdict (deviation #18:
an init over `init_wall_s` is `init_error`, its category `init_timeout`)."""

START_CATEGORY: dict[str, str] = {"timeout": "init_timeout", "crashed": "init_crashed"}
"""Failed start call category -> the `errors.txt` category where it differs from the call's."""


def start_failure(category: str | None) -> tuple[str, str]:
    """(verdict, errors.txt category) of a submit whose policy failed to start."""
    category = category or "init_error"
    return START_VERDICT.get(category, "init_error"), START_CATEGORY.get(category, category)


def rollout_verdict(episode_categories) -> str:
    """The verdict of a submit whose episodes ran: `oom` over `rollout_timeout` over `ok`
    (deviation #14: other episode errors are listed but leave the submit `ok`)."""
    cats = set(episode_categories)
    return "oom" if "oom" in cats else "rollout_timeout" if "act_timeout" in cats else "ok"
