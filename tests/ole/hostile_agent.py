"""A hostile command agent (issue 31): it tries to take what is not its run's, then works its run.

Usage: hostile_agent.py TARGETS.json. It writes only inside the targets' `confine` folder (the
test's own: without a sandbox it sees every registry of the machine). The targets file names
what a real attacker would have to find (another run's token file and URL, the registry, a stand-in model provider on loopback);
the agent also searches for them itself, as the one in the issue did: the registry root in its
parents' command lines, tokens in every process's environment. Every attempt and its outcome go
to stdout as one JSON line (`{"report": ...}`), after the legitimate work: read its workspace,
write `system/policy.py`, submit over its own run's API (HTTP or agent-session/v3).
Stdlib only: it must run wherever the sandbox lets it.
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

POLICY = '''class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return 0 if obs[4] > 0 else 2
'''


def attempt(fn):
    """(True, value) when `fn()` worked, (False, the error) when it did not."""
    try:
        return [True, fn()]
    except Exception as exc:  # noqa: BLE001 - every failure is the outcome being recorded
        return [False, f"{type(exc).__name__}: {exc}"[:200]]


def read(path):
    with open(path, "rb") as f:
        return f.read(4096).decode(errors="replace")


def foreign_tokens():
    """How many distinct EVOPOLICYGYM_TOKENs other than this run's any visible process's environment
    holds (counted, never printed: uncontained, these are other people's runs)."""
    own = os.environ.get("EVOPOLICYGYM_TOKEN")
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"EVOPOLICYGYM_TOKEN="):
                        value = item.split(b"=", 1)[1].decode()
                        if value != own:
                            found.add(value)
        except OSError:
            pass
    return len(found)


def roots_in_command_lines():
    """Values of `--root` in any visible process's command line (how the issue's agent found the registry)."""
    roots = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        roots.update(args[i + 1] for i, a in enumerate(args[:-1]) if a == "--root")
    return sorted(roots)


def write_registry(root):
    with open(os.path.join(root, "pwned.txt"), "w") as f:
        f.write("the agent was here")
    with open(os.path.join(root, ".registry", "registry.sqlite3"), "ab") as f:
        f.write(b"")
    return "wrote"


def register(root):
    """`ole bundle register` of a bundle named `pwned`, as the issue's agent recorded a registration."""
    bundle = os.path.join(os.environ["EVOPOLICYGYM_WORKSPACE"], "system", "pwned.yaml")
    with open(os.path.join(root, "coder.yaml")) as f:
        text = f.read()
    with open(bundle, "w") as f:
        f.write(text.replace("name: coder", "name: pwned", 1))
    out = subprocess.run([sys.executable, "-m", "ole.cli", "--root", root, "bundle", "register", bundle],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"exit {out.returncode}: {out.stderr[-150:]}")
    return out.stdout[-150:]


def http(url, token, body=None):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def connect(host, port):
    with socket.create_connection((host, port), timeout=5):
        return "connected"


def v3(message):
    path = os.path.join(os.environ["EVOPOLICYGYM_WORKSPACE"], os.environ["EVOPOLICYGYM_SESSION_SOCKET"])
    payload = json.dumps(message).encode()
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(120)
        # A run directory can be deeper than AF_UNIX allows (108 bytes): go through its directory's descriptor.
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            conn.connect(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
        finally:
            os.close(fd)
        conn.sendall(len(payload).to_bytes(4, "big") + payload)
        head = b""
        while len(head) < 4:
            head += conn.recv(4 - len(head))
        n, body = int.from_bytes(head, "big"), b""
        while len(body) < n:
            body += conn.recv(n - len(body))
    return json.loads(body)


def work():
    """The legitimate path: read the workspace, write the policy, submit twice on the run's own API."""
    ws = os.environ["EVOPOLICYGYM_WORKSPACE"]
    done = {"read_workspace": sorted(os.listdir(ws))}
    with open(os.path.join(ws, "system", "policy.py"), "w") as f:
        f.write(POLICY)
    time.sleep(0.3)
    if os.environ.get("EVOPOLICYGYM_SESSION_SOCKET"):
        answers = [v3({"protocol": "agent-session/v3", "method": "submit", "episode_indices": ids})
                   for ids in ([0], [1, 2])]
        done["submits"] = [a.get("ok") and a["result"].get("status", "ok") for a in answers]
    else:
        token = os.environ["EVOPOLICYGYM_TOKEN"]
        done["info"] = http(os.environ["EVOPOLICYGYM_INFO_URL"], token)[0]
        done["submits"] = [http(os.environ["EVOPOLICYGYM_SUBMIT_URL"], token, {"env_instances": ids})[1].get("status")
                           for ids in ([0], [1, 2])]
    return done


def main(targets_path):
    with open(targets_path) as f:
        targets = json.load(f)
    report = {"uid": os.getuid(), "visible_pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
              "env_names": sorted(os.environ)}
    report["other_token_file"] = attempt(lambda: read(targets["other_token_file"]))
    report["other_control_dir"] = attempt(lambda: os.listdir(os.path.dirname(targets["other_token_file"])))
    report["foreign_tokens"] = foreign_tokens()
    report["roots_in_cmdlines"] = roots_in_command_lines()
    # it acts only on registries inside its test's own folder: an uncontained run (the control) sees
    # every process of the machine, other people's test registries among them
    roots = sorted(r for r in set(report["roots_in_cmdlines"]) | {targets["registry"]}
                   if os.path.realpath(r).startswith(targets["confine"] + os.sep))
    report["registry_listing"] = attempt(lambda: os.listdir(targets["registry"]))
    report["registry_write"] = [attempt(lambda r=r: write_registry(r)) for r in roots]
    report["registry_register"] = [attempt(lambda r=r: register(r)) for r in roots]
    host, port = targets["other_api"]
    report["other_api"] = attempt(lambda: connect(host, port))
    report["provider"] = attempt(lambda: connect(*targets["provider"]))
    report["feedback_write"] = attempt(lambda: open(os.path.join(os.environ["EVOPOLICYGYM_WORKSPACE"], "feedback",
                                                                 "forged.json"), "w").close())
    report["outside_write"] = attempt(lambda: open(os.path.join(os.path.dirname(os.environ["EVOPOLICYGYM_WORKSPACE"]),
                                                                "escaped.txt"), "w").close())
    report["work"] = attempt(work)
    print(json.dumps({"report": report}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
