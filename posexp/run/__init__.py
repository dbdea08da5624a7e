"""One run's lifecycle: lifecycle.py runs it (lock, skip / resume / re-score / refuse, train,
evaluate, record), training.py is the training loop, workloads.py what it trains on and is
scored by (a corpus or a task), evaluation.py scores a trained run again, finetune.py
continues one, setup.py picks the device and builds the model."""

from posexp.run.evaluation import evaluate_dir
from posexp.run.finetune import finetune_config
from posexp.run.lifecycle import existing, run
from posexp.run.setup import build_model, pick_device

__all__ = ["build_model", "evaluate_dir", "existing", "finetune_config", "pick_device", "run"]
