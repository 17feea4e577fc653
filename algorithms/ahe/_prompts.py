"""AHE role prompts: Agent Debugger (one report per trace, then a synthesis) and Evolve Agent.
Rendered strictly with ``rsi.prompting.render``: a missing or unused variable raises; literal
braces are doubled."""

DEBUG = """\
You are the Agent Debugger. Below is one rollout of the agent harness (version {version}) on the
train task {task_id}: its score {score} (a task passes at 1.0), its status, and its trace.

Diagnose it: what the harness did step by step, where it went wrong (or, if it passed, what made
it work), and which part of the harness (which file or component) is responsible. Cite the
trace. Write a short, concrete report; do not propose an edit yet.

## Trace of {task_id}
{trace}
"""

SYNTHESIZE = """\
You are the Agent Debugger. These are your reports on the rollouts of the agent harness (version
{version}) on its train tasks, failures first. Write one cross-task synthesis: the recurring
failure patterns, the root cause of each in the harness (name the files or components), which
tasks each pattern explains, and which patterns a harness change could fix, most failing tasks
first.

## Scores per train task (a task passes at 1.0)
{scores}

## Reports
{reports}
"""

EVOLVE = """\
You are the Evolve Agent. Your working directory is a checkout of the agent harness, version
{version}, which scores a mean of {mean} on its train tasks. Edit its files directly with your
tools so that failing tasks pass without breaking passing ones. Every edit you make is kept, and
next round it is judged against what you declare now, so declare honestly.

## Scores per train task (a task passes at 1.0)
{scores}

## Diagnosis
{diagnosis}

## Last round: your declared changes and their verdicts
{verdicts}

For each earlier change decide: KEEP it, IMPROVE it, or ROLLBACK it (restore the original
content below; delete a file that did not exist).

## Rollback sources: the contents the files changed last round had before that edit
{rollback_sources}

## Declined edits (latest {declined_count}; they changed nothing)
{declined}

## Components
Every file must match exactly one rule below; a new file that matches no rule (or several)
declines the whole edit, and so does an edit that changes nothing. You may change: {scope}

{components}

## Manifest
End your reply with a manifest of this edit, one JSON object in a <MANIFEST> block:
<MANIFEST>
{{
  "failure_evidence": ["task ids and trace evidence of the failures you address"],
  "root_cause": "why the harness failed",
  "targeted_fix": "what you changed",
  "changes": [{{"path": "relative/file", "fix_tasks": ["task ids this change should make pass"],
               "risk_tasks": ["passing task ids this change might break"]}}]
}}
</MANIFEST>
- "changes" must list exactly the files you changed (added and deleted ones included): a file
  changed but not declared, or declared but not changed, declines the edit.
- Instead of "changes" you may give one overall "predicted_impact": {{"fix_tasks": [...],
  "risk_tasks": [...]}}, which then applies to every changed file; a change without
  "fix_tasks" or "risk_tasks" inherits it. An empty list is a prediction too: nothing.
- Next round each change is judged: EFFECTIVE (every fix task flipped to pass),
  PARTIALLY_EFFECTIVE, MIXED (flips and realised risks), HARMFUL (only realised risks) or
  INEFFECTIVE; regressions no change declared are reported as unattributed.
"""

NO_ROUND_YET = "(none yet: this is the first edit)"
NO_DECLINED = "(none)"
RAW_TRACES = "Raw traces of the current version (failures first); no debugger reports this run.\n\n{traces}"
WITH_DEBUGGER = "### Debugger synthesis\n{synthesis}\n\n### Debugger reports per task (failures first)\n{reports}"
