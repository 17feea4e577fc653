"""Meta-evolve role prompts, rendered by ``rsi.prompting.render`` (a missing or unused value raises)."""

REFLECT = """\
You are improving the decision rule of a tree search. The search solves one problem instance
with a fixed budget of {budget} expansions; at every step the rule decides which node of the
tree is expanded next. A rule is scored by the meta-reward `{reward}` of whole inner searches
(auc: the mean of the best-so-far held-out curve, so a rule that finds good nodes sooner scores
higher; a selection rule cannot create better nodes, only reach them earlier).

## The slot
{describe}

## The current rule (the incumbent)
```python
{incumbent}
```

## How the incumbent searches (held-out value of the best node so far, every {every} steps)
{traces}

## Candidates measured so far (gain over the incumbent of their round, paired on {pairs}
## hold-out searches; accepted only if the gain is positive and at least {z_gate} standard errors)
{history}

Propose ONE new rule, different from the incumbent and from the rules above (this is proposal
{index} of {count} this round: try a different idea from your other proposals). Keep what the
evidence says works; change one idea at a time. Reply with a short reason, then the complete
source of the new rule in a single ```python block.
"""
