"""The table benchmark's target: answer with this version's name.

Editing ``VERSION`` is the whole search space: the benchmark's table says what each version
scores on each task, so a search over this target has outcomes known in advance.
"""

import json
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.stdin.read()  # the task ({"task_id": ...}); the answer does not depend on it
    version = (Path(__file__).resolve().parent / "VERSION").read_text().strip()
    print(json.dumps({"answer": version}))
