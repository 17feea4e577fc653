"""DarwinX role prompts, rendered by ``rsi.prompting.render`` (a missing or unused value raises)."""

MUTATE = """\
You are improving the target in this directory (your working directory is a checkout of
version {parent_id}). Edit the files directly; your change is measured on the train tasks.

## Preservation contract
A change is admitted only if, re-measured on every train task ({confirm_samples} repetitions each):
- the summed per-task gain is positive;
- the summed per-task regression (drops) is at most {regression_tolerance};
- every task this lineage already solves (avg score >= {solved_threshold}) stays solved:
  {invariant}
Extend what works; do not trade one task for another.

## Components (every file must match exactly one rule; you may change: {scope})
{components}

## Traces of the parent (failures first)
{traces}

## Archive (newest first)
{archive}

## Learnings from earlier attempts (newest first)
{learnings}

{donor}Make one focused change. End your reply with a short description of what you changed and why.
"""

GRAFT_NOTE = """A read-only copy of another admitted member, {donor_id} (train mean {donor_mean}), lies in
{donor_path}: you may take a part of it (a condition, a branch, a term) into this version.
Do not edit that folder; it is removed before your result is committed.

"""

RECOMBINE = """\
Your working directory is a checkout of the main version {main_id}. Read-only copies of two other
versions lie beside it:
- {ancestor_path}: their common ancestor ({ancestor_id})
- {donor_path}: the donor ({donor_id}), which solves tasks the main version does not: {donor_only}
Integrate the donor's actual changes relative to the ancestor into the main version (additions,
deletions, binary files and executable bits included) so the result keeps what the main version
solves and gains what the donor solves. Do not edit the reference folders; they are removed
before your result is committed.

## Components
{components}

## Preservation contract
Keep every task of the union solved: {invariant}
"""

DISTIL = """\
A candidate was just measured. Distil one reusable learning (one or two sentences) for later
attempts: what was tried, what it gained and lost, and what to try or avoid next.

Edit description: {reply}
Level reached: {level}; admitted: {admitted}
Gain: {gain}; regression mass: {regression}; lost solved tasks: {lost}
Improved tasks: {improved}
Regressed tasks: {regressed}
"""
