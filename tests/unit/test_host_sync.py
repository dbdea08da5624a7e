"""A training step reads nothing back from the device: a read (.item(), .tolist(), .cpu(),
.numpy()) makes the host wait for the accelerator, and one a step leaves a GPU idle between
steps (issue #47).  The loop reads its values once a log interval; validation and
checkpoints, at their own intervals, the host's own batch making (numpy, before the batch is
copied to the device) and AdamW's step counters (host tensors outside CUDA, where the fused
AdamW keeps them on the device and reads none) are outside what is counted."""

import contextlib

import pytest
import torch

from posexp import config as C
from posexp.config import derive
from posexp.data.tasks import TASKS, VOCAB_SIZE, TaskData
from posexp.run import training
from posexp.run.setup import build_model
from posexp.run.training import Loop, fit
from posexp.run.workloads import workload_of
from posexp.sinks import Sink
from tests.conftest import compose_args

READS = ("item", "tolist", "cpu", "numpy")
STEPS, LOG_EVERY = 24, 4


class Reads:
    """Every read of a tensor's value while counting is on."""

    def __init__(self) -> None:
        self.count, self.on = 0, True
        self.optimizers: list[torch.optim.Optimizer] = []

    def host_counter(self, tensor: torch.Tensor) -> bool:
        return any(tensor is state.get("step") for opt in self.optimizers
                   for state in opt.state.values())

    @contextlib.contextmanager
    def paused(self):
        was, self.on = self.on, False
        try:
            yield
        finally:
            self.on = was

    def wrap(self, name: str):
        original = getattr(torch.Tensor, name)

        def read(tensor, *args, **kwargs):
            if self.on and not self.host_counter(tensor):
                self.count += 1
            return original(tensor, *args, **kwargs)

        return read


def count_reads(monkeypatch, workload) -> Reads:
    reads = Reads()
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, reads.wrap(name))
    for owner, name in ((Loop, "validate"), (Loop, "checkpoint")):
        method = getattr(owner, name)

        def uncounted(*args, _method=method, **kwargs):
            with reads.paused():
                return _method(*args, **kwargs)

        monkeypatch.setattr(owner, name, uncounted)
    batch = workload.batch

    def host_batch(*args, **kwargs):
        with reads.paused():
            return batch(*args, **kwargs)

    monkeypatch.setattr(workload, "batch", host_batch)
    make = training.make_optimizer

    def kept(*args, **kwargs):
        reads.optimizers.append(make(*args, **kwargs))
        return reads.optimizers[-1]

    monkeypatch.setattr(training, "make_optimizer", kept)
    return reads


@pytest.mark.parametrize("encoding", ["rope", "alibi"])
def test_the_loop_reads_the_device_once_a_log_interval(monkeypatch, encoding):
    C.register()
    cfg = C.resolve(compose_args([
        "data=task", "task=copy", f"encoding={encoding}", "model.d_model=32",
        "model.n_layer=1", "model.n_head=2", "train.seq_len=32", "train.batch_tokens=256",
        f"train.tokens={STEPS * 256}", f"train.log_every={LOG_EVERY}",
        f"train.val_every_tokens={STEPS * 256}", f"train.checkpoint_every={STEPS * 256}",
        "device=cpu"]))
    spec = C.RunSpec.of(cfg)
    data = TaskData(TASKS["copy"], derive.task_max_length(cfg))
    torch.manual_seed(0)
    model = build_model(spec, VOCAB_SIZE)
    workload = workload_of(spec)
    reads = count_reads(monkeypatch, workload)
    logged = []
    monkeypatch.setattr(Loop, "record", lambda self, record: logged.append(record))
    fit(model, workload, data, spec, None, Sink(), torch.device("cpu"), progress=False)
    losses = [r for r in logged if "loss" in r]
    assert len(losses) == STEPS // LOG_EVERY
    # the values still come back: the loss and the gradient norm at each log, the first
    # step's loss (read at the first log, for the end's "learned nothing" check)
    assert all(r["loss"] > 0 and r["grad_norm"] > 0 for r in losses)
    assert training.math.isfinite(losses[0]["loss"])
    assert reads.count == STEPS // LOG_EVERY
