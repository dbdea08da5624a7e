"""config/composer.py: a compose that keeps the part the config groups make gives what Hydra
gives the whole way, key for key (Hydra's own node too) and error for error."""

import pytest
from hydra import compose as hydra_compose
from omegaconf import OmegaConf

from posexp.config.compose import CONFIG_DIR, hydra_context
from posexp.config.composer import compose_cached
from posexp.config.schema import register
from tests.conftest import TINY

register()

CASES = [
    ["encoding=rope", *TINY],
    ["encoding=alibi", *TINY, "seed=3", "train.lr=0.002"],
    ["seed=3", "encoding=alibi", "model=tiny", "train.tokens=4096"],
    ["encoding=t5", "encoding.hparams.num_buckets=16", "hydra.job.chdir=false"],
    ["data=task", "task=copy", "train.seq_len=32", "hydra/launcher=joblib",
     "hydra.launcher.n_jobs=2"],
    ["encoding=rope", "+model.extra=1"],
    ["encoding=rope", "~logger"],
    ["encoding=fire", "run_name='x-${seed}'", "eval.lengths=[16,32]"],
    ["encoding=rope", "model={d_model:64,n_head:2}"],  # a group's key given a dict: a value
]


def composed(overrides, cached):
    with hydra_context(None) as hydra:
        if cached:
            return compose_cached(hydra, "config", overrides, [CONFIG_DIR])
        return hydra_compose("config", overrides=overrides, return_hydra_config=True)


def outcome(overrides, cached):
    try:
        cfg = composed(overrides, cached)
    except Exception as e:  # the error is what is compared
        return type(e).__name__, str(e)
    with_hydra = OmegaConf.to_container(cfg, resolve=False)
    with_hydra["hydra"]["runtime"].pop("output_dir", None)
    return with_hydra, OmegaConf.is_struct(cfg)


@pytest.mark.parametrize("overrides", CASES, ids=[" ".join(c[:2]) for c in CASES])
def test_the_kept_compose_gives_what_hydra_gives(overrides):
    first = outcome(overrides, cached=True)  # composes the groups' part
    assert first == outcome(overrides, cached=False)
    assert outcome(overrides, cached=True) == first  # from the kept part


@pytest.mark.parametrize("overrides", [["seed=1", "train.nokey=2"], ["encoding=nosuch"],
                                       ["encoding=rope", "model.d_model=abc"]])
def test_errors_are_hydras_own(overrides):
    for _ in range(2):
        assert outcome(overrides, cached=True) == outcome(overrides, cached=False)


def test_the_values_of_one_compose_never_reach_the_next():
    a = composed(["encoding=rope", "seed=5", "train.lr=0.5"], cached=True)
    b = composed(["encoding=rope"], cached=True)
    assert (a.seed, a.train.lr) == (5, 0.5)
    assert (b.seed, b.train.lr) != (5, 0.5) and list(b.hydra.overrides.task) == ["encoding=rope"]


def test_a_config_file_edited_since_is_read_again(tmp_path):
    (tmp_path / "encoding").mkdir()
    mine = tmp_path / "encoding" / "mine.yaml"
    mine.write_text("name: rope\nbase: 100.0\n")
    for base in (100.0, 500.0):
        mine.write_text(f"name: rope\nbase: {base}\n")
        with hydra_context(str(tmp_path)) as hydra:
            cfg = compose_cached(hydra, "config", ["encoding=mine"], [CONFIG_DIR, str(tmp_path)])
        assert cfg.encoding.base == base
