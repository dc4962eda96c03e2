"""A small external agent for the command-agent tests: writes a policy and submits over urllib.

Usage: scripted_agent.py [normal|sleep|spam|crash|leave|leave_hang|tamper]. `leave` starts processes
that would outlive it (see `leave_processes_behind`; their tag goes to workspace/left.json) and exits; `leave_hang` then ignores SIGTERM and
hangs; `tamper` breaks two feedback summaries and puts a FIFO at system/policy.py. `normal` submits twice (2 episodes,
then the rest of the budget); `sleep` submits once and then hangs (wall-clock cap);
`spam` writes a lot to stdout (output cap); `crash` exits 3 without submitting.
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

POLICY = '''class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.gain = {gain}

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return 0 if self.gain * obs[4] > 0 else 2
'''


def call(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ["EVOPOLICYGYM_TOKEN"]})
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return json.loads(err.read() or b"{}")


def submit(gain, ids):
    with open(os.path.join(os.environ["EVOPOLICYGYM_SYSTEM"], "policy.py"), "w") as f:
        f.write(POLICY.format(gain=gain))
    time.sleep(0.3)  # let the watcher see the program before the submit starts
    answer = call(os.environ["EVOPOLICYGYM_SUBMIT_URL"], {"env_instances": ids})
    print("submit", answer.get("submit_id"), answer.get("status"), flush=True)


def main(mode):
    assert os.path.isfile(os.environ["OLE_INSTRUCTIONS"]), "instructions file missing"
    assert os.getcwd() == os.path.realpath(os.environ["EVOPOLICYGYM_WORKSPACE"])
    info = call(os.environ["EVOPOLICYGYM_INFO_URL"])
    print("budget", info["episode_budget"], "protocol", os.environ["EVOPOLICYGYM_PROTOCOL"], flush=True)
    print("brief ok" if "Protocol contract" in open(os.environ["OLE_INSTRUCTIONS"]).read() else "brief bad",
          file=sys.stderr, flush=True)
    if mode == "crash":
        sys.exit(3)
    if mode == "spam":
        sys.stdout.write("x" * 200_000)
        sys.stdout.flush()
    submit(1.0, [0, 1])
    if mode == "sleep":
        time.sleep(600)
    if mode in ("leave", "leave_hang"):
        leave_processes_behind()
        if mode == "leave_hang":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
        return
    if mode == "tamper":
        submit(2.0, [2])
        with open(os.path.join(os.environ["EVOPOLICYGYM_FEEDBACK"], "submit_000", "summary.json"), "w") as f:
            f.write("[]")  # a summary that is no dict
        os.mkdir(os.path.join(os.environ["EVOPOLICYGYM_FEEDBACK"], "submit_009"))
        with open(os.path.join(os.environ["EVOPOLICYGYM_FEEDBACK"], "submit_009", "summary.json"), "w") as f:
            json.dump({"submit_index": 9, "status": "ok", "env_instances": ["x"]}, f)  # a field that breaks
        path = os.environ["EVOPOLICYGYM_SYSTEM"] + "/policy.py"
        os.unlink(path)
        os.mkfifo(path)  # the watcher must not block on it
        time.sleep(0.5)
        return
    remaining = call(os.environ["EVOPOLICYGYM_INFO_URL"])["state"]["remaining_budget"]
    submit(2.0, list(range(2, 2 + remaining)))


def leave_processes_behind():
    """A child in the group that ignores SIGTERM and keeps stdout open, and a daemon that left the
    group (setsid after a fork), both carrying a fresh tag in their command line; the tag goes to
    left.json in the workspace (pids inside a sandbox's pid namespace mean nothing outside it)."""
    tag = f"ole-leftover-{os.getpid()}-{time.time_ns()}"
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                              "signal.SIG_IGN); time.sleep(600)", tag])
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(read)
            os.write(write, str(os.getpid()).encode())
            os.close(write)
            sys.stdout.flush()
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", tag])
        os._exit(0)
    os.close(write)
    daemon = int(os.read(read, 32))
    with open(os.path.join(os.environ["EVOPOLICYGYM_WORKSPACE"], "left.json"), "w") as f:
        json.dump({"tag": tag, "child": child.pid, "daemon": daemon}, f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "normal")
