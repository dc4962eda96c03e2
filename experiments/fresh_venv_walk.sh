#!/usr/bin/env bash
# The README's install path as a new user walks it: a fresh venv outside the checkout, a non-editable
# `pip install <checkout>` with pip's real dependency resolution (the metadata's ranges, no constraints
# file), a fresh $HOME, then the commands from an empty directory. Needs the package index (pip).
#
#     bash experiments/fresh_venv_walk.sh [WORKDIR]      # default: a new temporary folder
set -u
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-$(mktemp -d)}
rm -rf "$W"; mkdir -p "$W/home" "$W/user"
export HOME=$W/home; unset OLE_ROOT XDG_DATA_HOME
python3.11 -m venv "$W/venv"
t0=$(date +%s)
"$W/venv/bin/python" -m pip install -q --upgrade pip
"$W/venv/bin/python" -m pip install -q "$CHECKOUT" || { echo "FAIL: pip install"; exit 1; }
echo "install took $(( $(date +%s) - t0 )) s"
"$W/venv/bin/python" -m pip freeze | grep -iE "^(gymnasium|mujoco|box2d|minigrid|highway-env|gymnasium-robotics)="
cd "$W/user"
fail=0
step() { echo "\$ $*"; "$@"; rc=$?; echo "rc=$rc"; }
expect() { want=$1; shift; step "$@"; [ "$rc" = "$want" ] || { echo "FAIL: expected rc $want"; fail=1; }; }
expect 0 "$W/venv/bin/ole" --version
expect 0 "$W/venv/bin/ole" bundle list
expect 0 "$W/venv/bin/ole" champion show --env gym/acrobot
expect 0 "$W/venv/bin/ole" run --env gym/acrobot --agent builtin --profile quick
expect 0 "$W/venv/bin/ole" trace ls
expect 2 "$W/venv/bin/ole" run --env gym/acrobot --agent llm --model openai/gpt-4o-mini   # no llm extra: refused
expect 0 "$W/venv/bin/evogym" envs gym/acrobot
ls "$HOME/.local/share/ole/bundles"
[ "$fail" = 0 ] && echo "walk passed" || echo "walk FAILED"
exit $fail
