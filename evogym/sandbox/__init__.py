"""The policy sandbox: one untrusted `Policy` instance behind a process boundary.

- `process`: `PolicyProcess` (the trusted side of one sandbox), `Limits`;
- `replies`: `CallResult`, and the checks an untrusted worker reply must pass to become one;
- `snapshot`: static snapshot validation, before anything of it runs;
- `isolation`: the bubblewrap command line and filesystem view, the machine probe;
- `cgroup`: per-sandbox cgroup v1 memory and pids groups;
- `transport`: the host side of the wire between a `PolicyProcess` and the worker;
- `worker`: the script that runs *inside* the sandbox (stdlib only, never imports evogym);
  `channel` (the shared-memory layout both ends read, and the worker's end of it) is bound
  beside it;
- `spare`: a sandbox started ahead of the submit (or held-out evaluation) that will use it.

See docs/sandbox.md for the layers and what each one stops.
"""
from evogym.sandbox.isolation import POLICY_PACKAGES, probe_isolation
from evogym.sandbox.process import Limits, PolicyProcess
from evogym.sandbox.replies import CallResult
from evogym.sandbox.snapshot import validate_snapshot
from evogym.verdicts import CALL_CATEGORIES as CATEGORIES

__all__ = ["CallResult", "Limits", "PolicyProcess", "POLICY_PACKAGES", "probe_isolation",
           "validate_snapshot", "CATEGORIES"]
