"""`evogym envs`: the env ids the host accepts, with what an agent needs to pick one.

Per env: id, family, episode step limit, the anchors of its normalized score (our
measured random baseline and the best published agent; none outside Core16), and a
one-line summary of the observation and action spaces. The spaces are read from the
env itself (`envs.spaces_of`), so building the list constructs each env once.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from evogym import anchors, envs


def space_summary(schema: Mapping) -> str:
    """`Box(6,) float32`, `Discrete(3)`, `Dict(direction: Discrete(4), image: Image(7x7x3))`, ..."""
    kind = schema.get("type", "?")
    if kind in ("Box", "Image"):
        shape = "x".join(str(s) for s in schema.get("shape", [])) if kind == "Image" else \
            ",".join(str(s) for s in schema.get("shape", [])) + ("," if len(schema.get("shape", [])) == 1 else "")
        return f"{kind}({shape}) {schema.get('dtype', '')}".rstrip()
    if kind == "Discrete":
        start = schema.get("start", 0)
        return f"Discrete({schema.get('n')})" + (f" from {start}" if start else "")
    if kind == "MultiDiscrete":
        return f"MultiDiscrete({schema.get('nvec')})"
    if kind == "MultiBinary":
        return f"MultiBinary({schema.get('n')})"
    subs = schema.get("spaces")
    if kind == "Dict" and isinstance(subs, Mapping):
        return "Dict(" + ", ".join(f"{k}: {space_summary(v)}" for k, v in subs.items()) + ")"
    if kind == "Tuple" and isinstance(subs, list):
        return "Tuple(" + ", ".join(space_summary(v) for v in subs) + ")"
    return kind


def describe(slug: str) -> dict:
    """Everything `evogym envs` shows for one env id (raises `EnvNotFound` with a did-you-mean)."""
    spec = envs.resolve(slug)
    obs, act = envs.spaces_of(spec)
    found = anchors.anchors(spec.slug)
    best = anchors.PAPER_ROWS.get(anchors.core16_slug(spec.slug))
    best_agent = max(anchors.AGENTS, key=lambda a: best[a]) if best else None
    return {"env": spec.slug, "gym_id": spec.gym_id, "family": spec.family, "title": spec.title,
            "max_episode_steps": spec.max_steps, "core16": spec.slug in envs.CORE16,
            "random_baseline": found.random_baseline if found else None,
            "paper_best": found.expert_baseline if found else None, "paper_best_agent": best_agent,
            "obs": space_summary(obs), "action": space_summary(act),
            "obs_storage": envs.env_meta(spec)["obs_storage"]}


def catalog(slugs: Sequence[str] = ()) -> list[dict]:
    """`describe` of each slug (default: the Core16 suite, in suite order)."""
    return [describe(s) for s in (slugs or envs.CORE16)]


def table(rows: Sequence[dict]) -> str:
    """Aligned text table of `catalog` rows."""
    def num(v) -> str:
        return "-" if v is None else f"{v:.4g}"
    head = ["env", "family", "steps", "random", "paper best", "observation", "action"]
    body = [[r["env"], r["family"], str(r["max_episode_steps"]), num(r["random_baseline"]),
             num(r["paper_best"]) + (f" ({r['paper_best_agent']})" if r["paper_best_agent"] else ""),
             r["obs"], r["action"]] for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body])
