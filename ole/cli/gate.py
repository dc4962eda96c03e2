"""`ole gate CHALLENGER [--vs CHAMPION]`: the paired evaluation and the release gate for any registered version.

    ole bundle register my-coder.yaml --parent 1          # a version you wrote: coder@2
    ole gate coder@2 --envs gym/acrobot --budgets 32 --pools 201 202 203 204 205 206
    ole release coder@2 --reason "gated: see ole bundle show coder@2"

The challenger is paired with the champion (`--vs`, default: the version the channel routes
the gate tasks to now) on gate instances nobody tuned it on, judged by the same gate an evolve
uses (benefit, evidence, tail, cost; adaptive looks while the verdict is open), and the decision
is recorded in the registry as an evolve's: `ole release` of the version is then bounded by what
these pairs covered (hosts, env ids, the budget band), and `ole report` shows the decision. Every
gate task must lie in the challenger's scope; settings whose gate could never release are
refused before anything runs. The same command again returns the stored decision (its workdir,
`runs/gate/CHALLENGER-vs-CHAMPION-HASH`, holds the paired runs). Progress goes to stderr.
"""
from __future__ import annotations

import argparse

from ole.cli.common import ListArg, Output, agent_command, leaf, open_registry, seed_int
from ole.vocab import HOSTS


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole gate`."""
    p = leaf(subparsers, "gate", gate, "pair a registered version with a champion on unseen tasks and record the "
             "gate's decision", description=__doc__)
    p.add_argument("challenger", metavar="NAME@VERSION", help="the registered version to judge")
    p.add_argument("--vs", metavar="NAME@VERSION",
                   help="the champion (default: the version the channel routes the gate tasks to now)")
    p.add_argument("--envs", "--env", action=ListArg, dest="envs", default=None, metavar="ENV",
                   help="env slugs (default: the env ids of the challenger's scope, else the evolve's default suite)")
    p.add_argument("--budgets", action=ListArg, item=int, default=None, metavar="N",
                   help="episode budgets of every gate instance (default: 32,128, as an evolve's gate)")
    p.add_argument("--pools", action=ListArg, item=int, default=None, metavar="SEED",
                   help="pool seeds of the first look (default: 201-204, as an evolve's gate)")
    p.add_argument("--extra-pools", action=ListArg, item=int, default=None, metavar="SEED",
                   help="pool seeds the adaptive sample adds while the verdict is open (default: 205-208 without "
                        "--pools, none with it)")
    p.add_argument("--agent-seeds", action=ListArg, item=seed_int, default=(0,), metavar="SEED",
                   help="agent seeds crossed with every pool (default: 0)")
    p.add_argument("--host", choices=HOSTS, default="builtin",
                   help="host agent of every run (default: builtin); `command` runs --agent-command")
    p.add_argument("--agent-command", metavar="CMD", help="the command agent's command line, quoted (--host command)")
    p.add_argument("--model", help="model string of the LLM agent")
    p.add_argument("--profile", default="quick", help="host profile: paper, bench, quick or strict (default: quick)")
    p.add_argument("--gate-config", metavar="FILE", help="gate YAML (default: the packaged ole/gate.yaml)")
    p.add_argument("--channel", default="default", help="channel whose routing picks the champion (default: default)")
    p.add_argument("--workdir", help="resume store and host runs (default: runs/gate/CHALLENGER-vs-CHAMPION-HASH)")
    p.add_argument("--traces", default="traces", help="trace archive (default: %(default)s)")
    p.add_argument("--workers", type=int, default=1, help="parallel runs (default: 1)")
    p.add_argument("--executor", choices=("local", "ray"), default="local", help="where runs execute")
    p.add_argument("--address", help="Ray cluster address (--executor ray)")


def gate(args: argparse.Namespace) -> Output:
    """Run the paired evaluation and the gate; print the decision and the next step."""
    from ole import api
    from ole.cli.common import decision_lines
    from ole.preflight import check_model
    if args.host == "llm" and not args.model:
        from ole.errors import ValidationError
        raise ValidationError("--host llm needs --model", hint="e.g. --model openai/gpt-4o-mini or replay:FILE")
    check_model("--model", args.model if args.host == "llm" else None)
    command = agent_command(args.host, None, args.agent_command,
                            example="ole gate coder@2 --host command --agent-command 'python agent.py'")
    with open_registry(args) as registry:
        d = api.judge(args.challenger, vs=args.vs, envs=args.envs, budgets=args.budgets, pools=args.pools,
                     extra_pools=args.extra_pools, agent_seeds=args.agent_seeds, host=args.host, model=args.model,
                     command=command, profile=args.profile, gate_config=args.gate_config, channel=args.channel,
                     registry=registry, workdir=args.workdir, traces=args.traces, workers=args.workers,
                     executor=args.executor, address=args.address)
    lines = decision_lines(d)
    text = [f"gate: {d.challenger} vs {d.champion} on {d.stats.n_pairs} pairs -> {lines[0]}", *lines[1:]]
    if d.verdict == "release":
        text.append(f"next: ole release {d.challenger} --reason \"...\" (its scope is bounded by these pairs: "
                    f"{d.bound})")
    else:
        text.append(f"not released: {d.champion} keeps these tasks (`ole release {d.challenger} --force` overrides "
                    "the gate, recorded as forced)" if d.verdict == "reject" else
                    "not released: the evidence is too thin to judge; add --pools, --budgets or --agent-seeds")
    return Output(d.model_dump(mode="json"), "\n".join(text))
