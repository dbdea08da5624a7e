"""The algorithmic tasks: instances checked by hand and by an independent computation, the
loss mask, held-out determinism, the metrics and the n/a reasons."""
import hashlib
import subprocess
import sys
from pathlib import Path

from posexp.data.tasks import (
    TASKS,
    heldout,
)

ROOT = Path(__file__).resolve().parents[2]


PRINT_HASH = """
import hashlib
from posexp.data.tasks import TASKS, heldout
h = hashlib.sha256()
for task in TASKS.values():
    for instance in heldout(task, task.min_length + 4, 20, seed=7):
        h.update(instance.tokens.tobytes())
print(h.hexdigest())
"""


def test_heldout_is_fixed_across_calls_and_processes():
    h = hashlib.sha256()
    for task in TASKS.values():
        first = heldout(task, task.min_length + 4, 20, seed=7)
        again = heldout(task, task.min_length + 4, 20, seed=7)
        assert all((a.tokens == b.tokens).all() for a, b in zip(first, again, strict=True))
        for instance in first:
            h.update(instance.tokens.tobytes())
    r = subprocess.run([sys.executable, "-c", PRINT_HASH], cwd=ROOT, capture_output=True,
                       text=True, check=True)
    assert r.stdout.strip() == h.hexdigest()
