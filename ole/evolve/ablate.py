"""Cut a candidate down to the field changes that carry its search gain (`ole.ablation`).

Backward elimination on the in-scope search instances: the candidate's changes (against the
champion) are cut into units (`ole.ablation.units`); each unit in schema order is reverted to
the champion's value, the variant is registered (a child of the champion, so its lineage says
what it is) and paired with the champion on the same instances, and the unit is dropped when
the variant keeps the gain within the tolerance (`ole.ablation.carries`, judged against the
candidate as proposed, so small losses cannot add up). What is left is gated. Reverting the
last unit gives the champion itself, whose mean r is 0 by definition (not run).

The champion's runs are cached, so a unit costs one challenger run per instance; runs are
deterministic for a fixed agent seed, so a variant identical in behaviour reproduces the
candidate's scores exactly.
"""
from __future__ import annotations

from collections.abc import Sequence

from ole.ablation import Ablation, AblationStep, carries, changed_fields, flat, revert, units
from ole.chosen import ChosenVersion
from ole.errors import ValidationError
from ole.evolve.engine import Candidate, Engine
from ole.paired import Instance, instance_key, pair_stats
from ole.proposers import Edge, accepted, child_bundle


def _values(policy: dict, fields: Sequence[str]) -> dict:
    flat_policy = flat(policy)
    return {f: flat_policy[f] for f in fields}


def ablate(engine: Engine, champion: ChosenVersion, cand: Candidate, instances: Sequence[Instance],
           *, stage: str) -> tuple[Candidate, Ablation]:
    """The minimal variant of `cand` that keeps its gain on `instances`, and the record of how.

    `cand.pairs` must already cover `instances` (the search cascade ran them). Returns `cand`
    itself when every unit carries the gain (or it has a single unit).
    """
    keys = {instance_key(*i) for i in instances}
    parent_lp = champion.bundle.loop_policy.model_dump(mode="json")
    source_lp = cand.bundle.loop_policy.model_dump(mode="json")
    inside = [p for p in cand.pairs if instance_key(p.task, p.condition) in keys]
    source_mean = pair_stats(inside, engine.gate.cvar_alpha).mean_r
    cut = units(changed_fields(parent_lp, source_lp))
    current, current_lp, current_mean = cand, source_lp, source_mean
    steps: list[AblationStep] = []
    remaining = list(cut)
    for unit in cut if len(cut) > 1 else []:
        trial_lp = revert(current_lp, parent_lp, unit)
        variant, mean, why_not = _variant(engine, champion, cand, trial_lp, unit, instances, stage)
        if mean is None:
            steps.append(AblationStep(fields=unit, values=_values(source_lp, unit),
                                      parent_values=_values(parent_lp, unit), variant=None,
                                      mean_r_with=current_mean, mean_r_without=None, kept=True, reason=why_not))
            continue
        kept, reason = carries(source_mean, mean)
        steps.append(AblationStep(fields=unit, values=_values(source_lp, unit), parent_values=_values(parent_lp, unit),
                                  variant=variant.ref if variant is not None else champion.ref,
                                  mean_r_with=current_mean, mean_r_without=mean, kept=kept, reason=reason))
        engine.progress(f"  ablation of {cand.ref}: without {', '.join(unit)} -> {reason}: "
                        + ("kept" if kept else "dropped"))
        if not kept and variant is not None:
            current, current_lp, current_mean = variant, trial_lp, mean
            remaining.remove(unit)
    kept_fields = tuple(f for u in remaining for f in u)
    dropped = tuple(f for u in cut if u not in remaining for f in u)
    record = Ablation(source=cand.ref, instances=tuple(sorted(keys)), steps=tuple(steps), kept=kept_fields,
                      dropped=dropped, mean_r_source=source_mean, mean_r_result=current_mean)
    if dropped:
        engine.progress("  " + record.describe())
    return current, record


def _variant(engine: Engine, champion: ChosenVersion, cand: Candidate, policy: dict, unit: tuple[str, ...],
             instances: Sequence[Instance], stage: str) -> tuple[Candidate | None, float | None, str]:
    """The registered variant without `unit` and its mean r on `instances` (None, None, why: none formed).

    Without its last unit a candidate is the champion: mean r 0 by definition, nothing run.
    """
    prov = cand.bundle.provenance
    edge: Edge = "online" if prov.edge == "online" else "offline_mutation"  # a variant is made where its source was
    try:
        bundle = child_bundle([champion], policy, edge=edge, evidence_ids=prov.evidence_ids,
                              generation=prov.generation, proposer=engine.proposer.name,
                              note=f"ablation of {cand.ref}: without {', '.join(unit)}")
    except ValidationError as exc:
        return None, None, f"no valid policy without it ({exc.message})"
    variant = engine.register(accepted(engine.proposer.name, edge, [champion], bundle), champion.bundle)
    if variant is None:  # the same content as the champion
        return None, 0.0, ""
    engine.evaluate(champion, [variant], instances, stage=f"{stage}-ablate")
    return variant, variant.stats.mean_r, ""
