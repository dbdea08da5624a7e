"""One run's lifecycle: lifecycle.py runs it (lock, skip / resume / re-score / refuse, train,
evaluate, record), training.py is the training loop, workloads.py what it trains on and is
scored by (a corpus or a task), evaluation.py scores a trained run again, finetune.py starts
a fine-tune from its parent's weights (runs/parents.py builds its config), restore.py trains
a record's weights again, setup.py picks the device and builds the model."""

from posexp.run.evaluation import evaluate_dir
from posexp.run.lifecycle import existing, run
from posexp.run.setup import build_model, pick_device

__all__ = ["build_model", "evaluate_dir", "existing", "pick_device", "run"]
