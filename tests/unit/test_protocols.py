"""Each workload implements its protocol (posexp/run/protocols.py): the corpus and task
workloads train and are scored (Workload), a pretrained model is scored alike (Scored);
evaluation reads nothing else of them."""
import inspect

from posexp.pretrained.scoring import PretrainedWorkload
from posexp.run.protocols import Scored, Workload
from posexp.run.workloads import CorpusWorkload, TaskWorkload


def _members(protocol) -> set[str]:
    return {n for n, v in vars(protocol).items() if inspect.isfunction(v)
            or isinstance(v, staticmethod)} | set(protocol.__annotations__)


def test_every_workload_implements_its_protocol():
    for cls in (CorpusWorkload, TaskWorkload):
        assert {*_members(Workload), *_members(Scored)} <= set(dir(cls)), cls.__name__
    assert _members(Scored) <= set(dir(PretrainedWorkload))
    # as the drivers call them: a static method is called on the instance with one argument
    for cls in (CorpusWorkload, TaskWorkload, PretrainedWorkload):
        for name in ("points", "key"):
            assert isinstance(inspect.getattr_static(cls, name), staticmethod), (cls, name)
        params = list(inspect.signature(cls.requested).parameters)
        assert params == ["self", "scalings", "scored"], cls.__name__
