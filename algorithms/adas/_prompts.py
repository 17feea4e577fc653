"""ADAS role prompts (the meta agent's design and reflection prompts), after the upstream
Meta Agent Search prompts, rewritten for a design that is a directory the agent edits.
Rendered strictly with ``rsi.prompting.render``: a missing or unused variable raises."""

SEED_ACCOUNT = "The target as given: the starting design, before any search."

ARCHIVE_NOTE = """\
Each line is one evaluated design, oldest first, exactly as archived: "account" is the
description its author gave, "score" its mean score on the validation (dev) tasks, in [0, 1].
Worse designs stay on purpose: they show what was tried and what it cost."""

DESIGN = """\
# Overview
You are an expert researcher of agentic systems. Your objective is to design the building blocks
of the system in this directory (its prompts, control flow, tools, settings) so that it scores
higher on its tasks. Your working directory is a checkout of design {parent_id}, the best design
in the archive so far (score {parent_score}). Edit its files directly with your tools; what you
leave in the directory is the next design, and it will be evaluated on the validation tasks.

# Archive of evaluated designs
{archive_note}

{archive}

# Components
Every file must match exactly one rule below; a new file that matches no rule (or several)
rejects the whole design, and so does a design that changes nothing. You may change: {scope}

{components}

# Your task
Observe the archived designs carefully and think about what insights, lessons or stepping stones
can be learned from them. Be creative when you think about the next design to try; draw on what
you know of prompting techniques and agent designs from the literature and from other fields.
Use the knowledge from the archive to propose and implement the next interesting design.
THINK OUTSIDE THE BOX.

When the files are written, describe the design in your final reply:
<DESIGN>
What this design does, how it differs from the designs in the archive, and why it should score
higher.
</DESIGN>
"""

REFLECT = """\
This is review {round} of {rounds} of the design you just produced. The directory already holds
your changes (it is the same checkout); read the files you changed before you judge them.

Your description of the design so far:
<DESIGN>
{account}
</DESIGN>

Carefully review the design and reflect on the following points:
1. Interestingness: is it interesting or new compared to the designs in the archive below? If it
   is not, change it into a design that is.
2. Implementation mistakes: anything in the files that would stop the system from running or
   from answering in the expected format (a crash, a wrong key, stray output). Fix it.
3. Improvement: concrete changes to the implementation that would raise the score. Make them.

Revise the files in place, then end your reply with the final description of the design (repeat
the one above if nothing changed):
<DESIGN>...</DESIGN>

# Archive of evaluated designs
{archive_note}

{archive}

# Components
Every file must match exactly one rule below. You may change: {scope}

{components}
"""
