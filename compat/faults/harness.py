"""Command line of the fault harness: ``python compat/faults/harness.py --runs N --seed S
[--duration SECONDS] [--keep DIR] [--netns auto|on|off] [--faults all|process|partition]
[--first-fault ACTION[:SECONDS]] [--hostile] [--workload append|txn]`` (``--help`` lists them
all). The harness itself (nemesis, clients, checker) is ``jepsen.py`` next to this file, the
transactional workload ``txn.py``; see their docstrings for what a run does and checks.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jepsen import *  # noqa: E402,F401,F403  (the library, for `import harness` from here)
from jepsen import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
