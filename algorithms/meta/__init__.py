"""meta-evolve: evolve the search's own decision policies, validate them on unseen, harder
problems, and report transfer.

The outer search's artifact is the value of a decision slot (``algorithms.slots``); one outer
rollout is one whole inner search run with the candidate value (``run_inner``: a pure function
of policy source, domain, instance, seed and budget); its score is the meta-reward (``auc`` of
the held-out best-so-far curve). Gates on values (``validate_proposal``) confine a rewrite to
making decisions; they are not a sandbox. A proposed rule is hostile code and runs only in the
rollout jail: its check there (``jailed.check_in_jail``), and in its rollouts it answers, from
the jail, which node the trusted inner search expands next (``jailed.run_searches``).

Modules: ``tree`` (ERA flat tree, FlatPuct, PrioritySelection), ``gate`` and ``smoke`` (proposal
gates), ``values`` (slot value kinds), ``rewards``, ``inner`` (one inner search, domains,
c-sweep), ``jailed`` and ``jail_harness`` (the two sides of the jail), ``landscape`` /
``binpack`` / ``harbor`` (stages 0-2), ``mutate`` (offline proposals), ``stats`` (paired gate,
validation, transfer).
"""

from algorithms.meta.inner import DOMAINS, Expansion, c_sweep, domain_named, run_inner, scores, tree_search
from algorithms.meta.mutate import mutate_priority, mutate_source, symbolic_proposals
from algorithms.meta.proposal_check import PRIORITY_SEED, InvalidProposal
from algorithms.meta.rewards import MetaOutcome, auc, final_reward, reward_named, rollouts_to
from algorithms.meta.seeds import seed_source
from algorithms.meta.stats import FamilyReport, GateResult, meta_validate, paired_gate, required_holdout, transfer_ratio
from algorithms.meta.tree import FlatPuct, Node, PrioritySelection, Tree
from algorithms.meta.values import ParamSlot, SourceSlot, policy_source, priority_selection, validate_proposal

__all__ = [
    "DOMAINS",
    "PRIORITY_SEED",
    "Expansion",
    "FamilyReport",
    "FlatPuct",
    "GateResult",
    "InvalidProposal",
    "MetaOutcome",
    "Node",
    "ParamSlot",
    "PrioritySelection",
    "SourceSlot",
    "Tree",
    "auc",
    "c_sweep",
    "domain_named",
    "final_reward",
    "meta_validate",
    "mutate_priority",
    "mutate_source",
    "paired_gate",
    "policy_source",
    "priority_selection",
    "required_holdout",
    "reward_named",
    "rollouts_to",
    "run_inner",
    "scores",
    "seed_source",
    "symbolic_proposals",
    "transfer_ratio",
    "tree_search",
    "validate_proposal",
]
