"""An external agent that follows its brief: the loop policy reaches it only as instructions.

It reads `$OLE_INSTRUCTIONS`, takes the submit size from the line "Submit K episodes per
exploratory submit" and the step from "change constants by about S of their scale", then
spends the budget in submits of K episodes, moving one gain by S each time. So two bundles
that differ in `action.episodes_per_submit` or `action.step_size` make it behave differently,
which the command-host tests check through the host's feedback.
"""
import json
import os
import re
import sys
import urllib.request

POLICY = '''class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.gain = {gain}

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return 2 if self.gain * obs[4] > 0 else 0
'''


def call(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ["EVOPOLICYGYM_TOKEN"]})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def main() -> None:
    brief = open(os.environ["OLE_INSTRUCTIONS"]).read()
    k = int(re.search(r"Submit (\d+) episodes per exploratory submit", brief).group(1))
    step = float(re.search(r"change constants by about ([0-9.]+) of their scale", brief).group(1))
    print(json.dumps({"episodes_per_submit": k, "step_size": step}), flush=True)
    gain, start = 1.0, 0
    while True:
        remaining = call(os.environ["EVOPOLICYGYM_INFO_URL"])["state"]["remaining_budget"]
        if remaining <= 0:
            return
        n = min(k, remaining)
        with open(os.path.join(os.environ["EVOPOLICYGYM_SYSTEM"], "policy.py"), "w") as f:
            f.write(POLICY.format(gain=gain))
        answer = call(os.environ["EVOPOLICYGYM_SUBMIT_URL"], {"env_instances": list(range(start, start + n))})
        print("submit", n, answer.get("status"), flush=True)
        start += n
        gain = gain - step if gain - step != 0 else gain + step


if __name__ == "__main__":
    sys.exit(main())
