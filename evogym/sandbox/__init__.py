"""The policy sandbox: one untrusted `Policy` instance behind a process boundary.

- `process`: `PolicyProcess` (the trusted side of one sandbox), `Limits`, `CallResult`,
  static snapshot validation;
- `isolation`: the bubblewrap command line and filesystem view, the machine probe;
- `cgroup`: per-sandbox cgroup v1 memory and pids groups;
- `transport`: the host side of the wire between a `PolicyProcess` and the worker;
- `worker`: the script that runs *inside* the sandbox (stdlib only, never imports evogym).

See docs/sandbox.md for the layers and what each one stops.
"""
from evogym.sandbox.isolation import POLICY_PACKAGES, probe_isolation
from evogym.sandbox.process import CallResult, Limits, PolicyProcess, validate_snapshot
from evogym.verdicts import CALL_CATEGORIES as CATEGORIES

__all__ = ["CallResult", "Limits", "PolicyProcess", "POLICY_PACKAGES", "probe_isolation",
           "validate_snapshot", "CATEGORIES"]
