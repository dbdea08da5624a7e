"""The files and the table of bad inputs that tests/*/test_inputs.py feed posexp: each
input, its exit code and the words its one line must hold."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import yaml
from omegaconf import OmegaConf

from posexp import config as C
from posexp.version import PROTOCOL
from tests.conftest import TINY, compose_args
from tests.corpora import write_words
from tests.presets import shipped_preset

UNSET = "POSEXP_TEST_UNSET_VARIABLE"


CUDA_GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


# --- the files the bad inputs point at ------------------------------------------------------
def fake_run(path: Path, config: str, checkpoint: bytes | dict | None) -> None:
    """A run directory as posexp eval finds it, without training: config.yaml, run.json
    (completed, under this posexp's protocol) and checkpoint.pt as given."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(config)
    (path / "run.json").write_text(json.dumps({"status": "completed", "steps": 1,
                                               "protocol": PROTOCOL}))
    if isinstance(checkpoint, bytes):
        (path / "checkpoint.pt").write_bytes(checkpoint)
    elif checkpoint is not None:
        torch.save(checkpoint, path / "checkpoint.pt")


def make_inputs(d: Path) -> None:
    write_words(d / "corpus.txt", 60_000)
    os.mkfifo(d / "fifo")
    (d / "loop").symlink_to(d / "loop")
    (d / "dangling").symlink_to(d / "nowhere")
    (d / "empty_dir").mkdir()
    config_dirs = {
        "cd_target/encoding/pwn.yaml": "defaults:\n  - encoding_schema\nname: rope\n"
                                       "_target_: os.system\n",
        "cd_callbacks/hydra/callbacks/pwn.yaml": "x:\n  _target_: os.makedirs\n  name: pwned\n",
        "cd_logging/hydra/job_logging/pwn.yaml": "version: 1\nhandlers:\n  x:\n    class: "
                                                 "os.system\n    command: touch pwned\n",
        "cd_newenc/encoding/zope.yaml": "defaults:\n  - encoding_schema\nname: zope\n",
        "cd_extra/encoding/extra.yaml": "defaults:\n  - encoding_schema\nname: rope\nfoo: 1\n",
        "cd_broken/encoding/broken.yaml": "name: [\n",
        "cd_primary/mine.yaml": "defaults:\n  - config\n  - _self_\nseed: 7\n",
    }
    for name, text in config_dirs.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    preset = shipped_preset("cpu")
    (d / "broken.yaml").write_text("runs: [\n  - [encoding=rope\n")
    (d / "nokey.yaml").write_text(yaml.safe_dump({k: v for k, v in preset.items()
                                                  if k != "thresholds"}))
    (d / "flatruns.yaml").write_text(yaml.safe_dump({**preset, "runs": ["encoding=rope"]}))
    (d / "badreport.yaml").write_text(yaml.safe_dump({**preset, "report": "../elsewhere"}))
    (d / "nomodel.yaml").write_text(yaml.safe_dump({**preset, "thresholds": {
        **preset["thresholds"], "t5_flat": "high"}}))
    encodings = shipped_preset("encodings")
    del encodings["thresholds"]["randomized"]
    (d / "norandom.yaml").write_text(yaml.safe_dump(encodings))
    (d / "target.yaml").write_text(yaml.safe_dump(
        {**preset, "overrides": ["+hydra.callbacks.x._target_=os.makedirs"]}))
    # issue #28: a preset that writes outside --results-dir; thresholds no claim can use
    (d / "elsewhere.yaml").write_text(yaml.safe_dump(
        {**preset, "runs": [["encoding=rope", f"results_dir={d}/elsewhere"]]}))
    (d / "flat15.yaml").write_text(yaml.safe_dump({**preset, "thresholds": {
        **preset["thresholds"], "alibi_flat_at": [1.5]}}))
    # runs: a config that evaluates on the small corpus, and damaged variants
    C.register()
    cfg = C.resolve(compose_args([*TINY, "data=text", f"data.path={d / 'corpus.txt'}"]))
    config = OmegaConf.to_yaml(cfg)
    from tests.conftest import build_model

    weights = {"model": build_model(cfg, 256).state_dict()}
    runs = d / "runs" / "e"
    fake_run(runs / "good", config, weights)
    fake_run(runs / "zeroed", config, b"\0" * 4096)
    fake_run(runs / "nomodel", config, {"step": 1, "optimizer": {}})
    fake_run(runs / "badyaml", "model: [\n", weights)
    fake_run(runs / "notmapping", "- 1\n", weights)
    fake_run(runs / "wrongkeys", config.replace("seq_len:", "seqlen:"), weights)
    (d / "notarun").mkdir()


def device_words(device: str) -> list[str]:
    if CUDA_GPUS == 0:
        return [f"device={device} but torch sees no CUDA GPU"]
    return [f"device={device} but torch sees {CUDA_GPUS} CUDA GPU"]


# --- every bad input: (command line, exit code, words of the one line) ------------------------
# {d} is the directory of make_inputs; {run} a completed run there (runs/e/good).
RUN = "{d}/runs/e/good"


BAD = [
    # interpolations that cannot be resolved, in train, sweep and eval
    (["train", f"run_name=${{oc.env:{UNSET}}}"], 2,
     [f"run_name=${{oc.env:{UNSET}}} cannot be resolved", f"${{oc.env:{UNSET},default}}"]),
    (["train", "run_name=${missing.key}"], 2, ["run_name=${missing.key}", "'missing.key'"]),
    (["train", "experiment=${missing.key}"], 2, ["experiment=${missing.key} cannot be resolved"]),
    (["train", "train.lr=${nope}", "--cfg", "job"], 2, ["train.lr=${nope} cannot be resolved"]),
    (["train", "eval.lengths=[64,${nope}]"], 2, ["eval.lengths[1]=${nope} cannot be resolved"]),
    (["train", "run_name='${'"], 2, ["run_name: cannot read the interpolation"]),
    (["train", "run_name=${"], 2, ["cannot read the override 'run_name=${'"]),
    (["sweep", "seed=0,1", f"run_name=${{oc.env:{UNSET}}}"], 2, ["run_name=", UNSET]),
    (["sweep", "--cfg", "job", "experiment=${missing.key}"], 2, ["experiment=${missing.key}"]),
    (["eval", RUN, "eval.tokens=${nope}"], 2, ["eval.tokens=${nope} cannot be resolved"]),
    # Hydra's flags: the refused, the unknown, the malformed
    (["train", "--experimental-rerun", "{d}/job.pickle"], 2,
     ["--experimental-rerun is refused", "unpickles"]),
    (["sweep", "--experimental-rerun", "{d}/job.pickle"], 2, ["--experimental-rerun is refused"]),
    (["train", "--experimental", "{d}/job.pickle"], 2, ["has no option '--experimental'"]),
    (["train", "--config-path", "{d}"], 2, ["--config-path would replace", "--config-dir"]),
    (["train", "-cp", "{d}"], 2, ["--config-dir"]),
    (["train", "--shell-completion"], 2, ["no shell completion"]),
    (["train", "-m", "seed=1"], 2, ["posexp sweep runs several"]),
    (["sweep", "--run"], 2, ["posexp train runs one"]),
    (["train", "--foo"], 2, ["posexp train has no option '--foo'"]),
    (["train", "--cfg"], 2, ["--cfg needs a value: job, hydra, all"]),
    (["train", "--cfg", "jobs"], 2, ["--cfg takes job, hydra, all; got 'jobs'"]),
    (["train", "--info=bogus"], 2, ["--info takes"]),
    # code named in overrides or config files
    (["train", "+hydra.callbacks.x._target_=os.makedirs", "+hydra.callbacks.x.name=pwned"], 2,
     ["is refused", "posexp does not run code named in its config"]),
    (["train", "hydra.launcher._target_=os.system"], 2, ["is refused"]),
    (["sweep", "hydra.launcher={_target_:os.system}"], 2, ["is refused"]),
    (["train", "+hydra.job_logging.handlers.x.class=os.system"], 2,
     ["hydra.job_logging.handlers.x.class cannot be set"]),
    (["train", "hydra.searchpath=[pkg://evil]"], 2, ["hydra.searchpath cannot be set",
                                                     "--config-dir"]),
    (["train", "+hydra.job.env_set.LD_PRELOAD=/tmp/x.so"], 2,
     ["hydra.job.env_set.LD_PRELOAD is refused"]),
    (["train", "hydra.mode=MULTIRUN"], 2, ["hydra.mode cannot be set"]),
    (["train", "+hydra/callbacks=pwn"], 2, ["hydra/callbacks cannot be set"]),
    (["train", "--config-dir", "{d}/cd_target", "encoding=pwn"], 2,
     ["cd_target/encoding/pwn.yaml sets _target_"]),
    (["train", "--config-dir", "{d}/cd_callbacks"], 2,
     ["cd_callbacks/hydra/callbacks/pwn.yaml sets x._target_"]),
    (["sweep", "--config-dir", "{d}/cd_logging", "hydra/job_logging=pwn"], 2,
     ["pwn.yaml sets handlers.x.class: os.system"]),
    (["eval", RUN, "eval.lengths={_target_:os.system}"], 2, ["is refused"]),
    # issue #28: a refused key inside a value; a config from outside the config directories
    (["train", "encoding={name:evil,module:evilmod}"], 2,
     ["encoding.module names Python code to import", "inside encoding={name:evil"]),
    (["sweep", "encoding={name:evil,module:evilmod},rope"], 2, ["encoding.module names"]),
    (["train", "hydra.job={env_set:{LD_PRELOAD:/x.so}}"], 2,
     ["hydra.job.env_set.LD_PRELOAD is refused"]),
    (["train", "--config-name", "../../../../tmp/x/evil"], 2, ["is not the name of a config"]),
    (["train", "encoding=../../x/evil"], 2, ["'../../x/evil' is not an option of encoding"]),
    # groups and keys that posexp does not have
    (["train", "encoding=encoding_schema"], 2, ["there is no encoding 'encoding_schema'"]),
    (["train", "data=data_schema"], 2, ["there is no data 'data_schema'"]),
    (["sweep", "encoding=encoding_schema,rope"], 2, ["there is no encoding 'encoding_schema'"]),
    (["train", "+train.seqlen=128"], 2, ["train has no key 'seqlen'; did you mean 'seq_len'?",
                                         "'+' cannot add keys"]),
    (["train", "++train.seqlen=128"], 2, ["train has no key 'seqlen'; did you mean 'seq_len'?"]),
    (["train", "train.seqlen=128", "--cfg", "job"], 2, ["did you mean 'seq_len'?"]),
    (["train", "+seedd=1"], 2, ["posexp's config has no key 'seedd'; did you mean 'seed'?"]),
    (["train", "model.dmodel=64"], 2, ["model has no key 'dmodel'; did you mean 'd_model'?"]),
    (["sweep", "model.dmodel=64,128"], 2, ["did you mean 'd_model'?"]),
    (["train", "xyz=1"], 2, ["posexp's config has no key 'xyz'; its keys: encoding"]),
    (["train", "+train.seq_len=128"], 2, ["train.seq_len is set already", "without '+'"]),
    (["train", "~train.seq_len"], 2, ["cannot be deleted"]),
    (["train", "~logger"], 2, ["config groups cannot be removed"]),
    (["train", "train.seq_len.x=1"], 2, ["train.seq_len is a single value"]),
    (["train", "model=???"], 2, ["choose a model: model=OPTION, one of base, gpu, small, tiny"]),
    (["train", "run_name=???"], 2, ["run_name must be set"]),
    (["train", "--config-name", "posexp_schema"], 2, ["encoding, model, data", "must be set"]),
    (["train", "--config-name", "nope"], 2, ["there is no config 'nope'"]),
    (["train", "--config-dir", "{d}/nonexistent"], 2, ["is not a directory"]),
    (["train", "--config-dir", "{d}/cd_newenc", "encoding=zope"], 2,
     ["encoding.name 'zope' is not an encoding posexp has",
      "known: alibi, cope, fire, fox"]),
    (["train", "--config-dir", "{d}/cd_extra", "encoding=extra"], 2,
     ["encoding/extra: encoding has no key 'foo'"]),
    (["train", "--config-dir", "{d}/cd_broken", "encoding=broken"], 2, ["broken.yaml", "line"]),
    (["train", "hydra/launcher=nope"], 2, ["there is no hydra/launcher 'nope'", "joblib"]),
    (["train", "hydra/sweeper=nope"], 2, ["there is no hydra/sweeper 'nope'"]),
    (["train", "logger=nope"], 2, ["there is no logger 'nope'", "local, wandb"]),
    # several values where one run is asked for; arguments that are not overrides
    (["train", "seed=0,1"], 2, ["posexp sweep seed=0,1", "seed='0,1'"]),
    (["train", "encoding=rope,alibi"], 2, ["posexp sweep encoding=rope,alibi"]),
    (["train", "seed=range(3)"], 2, ["posexp sweep seed=range(3)"]),
    (["train", "experiment=my", "exp"], 2, ["'exp' is not an override", "experiment='my exp'"]),
    (["train", "experiment=my exp"], 2, ["experiment must be a plain directory name"]),
    (["train", "eval.lengths=[1,2"], 2, ["cannot read the override 'eval.lengths=[1,2'"]),
    (["train", "=3"], 2, ["has no key before '='"]),
    # types
    (["train", "train.lr=abc"], 2, ["train.lr must be a number, got 'abc'"]),
    (["train", "train.seq_len="], 2, ["train.seq_len must be an integer, got ''"]),
    (["train", "train.tokens=nan"], 2, ["train.tokens must be an integer, got 'nan'"]),
    (["train", "eval.lengths=abc"], 2, ["eval.lengths must be a list"]),
    # a list of floats: not "must be a number", and an example of its own kind (#35)
    (["train", "task=passkey", "task.depths=0.5"], 2,
     ["task.depths must be a list, e.g. task.depths=[0.5]"]),
    (["train", "eval.lengths=128"], 2, ["eval.lengths must be a list, e.g. eval.lengths=[128]"]),
    (["train", "eval.lengths=[1e300]"], 2, ["eval.lengths[0] must be an integer"]),
    (["train", "train.resume=maybe"], 2, ["train.resume must be true or false"]),
    (["train", "logger.mode=sometimes"], 2, ["logger.mode must be one of online, offline"]),
    (["train", "model.tie_weights=-1"], 2, ["model.tie_weights must be true or false, got -1"]),
    (["eval", RUN, "eval.mode=1"], 2, ["eval.mode must be one of"]),
    # settings the chosen corpus or tokenizer would silently ignore
    (["train", "data.path={d}/corpus.txt"], 2,
     ["data.path is set, but data=stdlib does not read it"]),
    (["train", "data=text", "data.path={d}/corpus.txt", "data.hf_name=x"], 2,
     ["data.hf_name is set, but data=text does not read it"]),
    (["train", "data.tokenizer_path={d}/corpus.txt"], 2,
     ["data.tokenizer_path is set, but data.tokenizer=byte does not read it"]),
    (["train", "data=task", "task=copy", "data.source=stdlib"], 2,
     ["data.source=stdlib contradicts data=task"]),
    # settings the chosen encoding, evaluation, task, scaling or logger would ignore (#28)
    (["train", "encoding=alibi", "encoding.base=500"], 2,
     ["encoding.base is set, but encoding=alibi does not read it"]),
    (["train", "encoding.max_positions=128"], 2,
     ["encoding.max_positions is set, but encoding=rope does not read it"]),
    (["train", "eval.stride=32"], 2,
     ["eval.stride is set, but eval.mode=nonoverlapping does not read it"]),
    (["eval", RUN, "eval.stride=8"], 2, ["eval.stride is set, but eval.mode=nonoverlapping"]),
    (["train", "eval.rope_scaling.beta_fast=16"], 2,
     ["eval.rope_scaling.beta_fast is set, but eval.rope_scaling has no method"]),
    (["train", "data=task", "task=copy", "task.depths=[0.5]"], 2,
     ["task.depths is set, but task=copy has no depth"]),
    (["train", "logger.project=foo"], 2, ["logger.project is set, but logger=local"]),
    # what used to fail late, with a raw error (#28)
    (["train", "encoding=xpos", "encoding.hparams.scale_base=1e-300"], 2,
     ["reaches only 0 positions, fewer than train.seq_len (64)"]),
    (["sweep", "seed=interval(0,1)"], 2, ["interval() is a continuous range"]),
    (["sweep", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0"], 2,
     ["hydra.launcher.n_jobs must be a non-zero integer"]),
    (["sweep", "seed=range(0,100000)", "--cfg", "job"], 2,
     ["this sweep has more than 1,001 jobs", "POSEXP_SWEEP_MAX_JOBS"]),
    (["train", "data=task", "task=copy", "train.seq_len=67108864", "train.batch_size=1",
      "train.tokens=100000000"], 2,
     ["eval.task_lengths by default are 1, 1.25, 1.5, 2 and 4 x n_max"]),
    (["train", "train.warmup_tokens=3000000"], 2, ["covers the whole run"]),
    (["train", "train.batch_size=8", "train.batch_tokens=4096"], 2, ["both size the batch"]),
    # values out of range, and sizes bounded by memory and time
    (["train", "seed=-1"], 2, ["seed must be an integer in [0, 2**63 - 1], got -1"]),
    (["train", "seed=100000000000000000000000"], 2, ["seed must be an integer in [0, 2**63"]),
    (["train", "seed=9223372036854775808"], 2, ["seed must be an integer in [0, 2**63"]),
    (["train", "data.vocab_size=100000000000000000000"], 2,
     ["data.vocab_size must be at most 262,144"]),
    (["train", "data.tokenizer=bpe", "data.vocab_size=1000000000"], 2,
     ["data.vocab_size must be at most 262,144 (2**18)"]),
    (["train", "eval.per_position_buckets=1000000000"], 2,
     ["eval.per_position_buckets must be at most 64"]),
    (["train", "eval.lengths=[64,64,128]"], 2, ["eval.lengths lists 64 more than once"]),
    (["train", "eval.lengths=[]"], 2, ["eval.lengths is empty"]),
    (["train", "eval.tokens=100000000000000000000000"], 2, ["eval.tokens must be at most"]),
    (["train", "eval.lengths=[64,2000000000]"], 2, ["each of eval.lengths must be at most"]),
    (["train", "eval.batch_tokens=0"], 2, ["eval.batch_tokens must be a positive integer"]),
    (["train", "model.d_model=65536", "model.n_layer=1024"], 2,
     ["this model would have about", "parameters"]),
    (["train", "model.n_layer=100000"], 2, ["model.n_layer must be at most"]),
    (["train", "train.seq_len=4294967296", "train.batch_tokens=null",
      "train.batch_size=1"], 2, ["train.seq_len must be at most"]),
    (["train", "train.batch_tokens=null", "train.batch_size=100000000"], 2,
     ["train.batch_size must be at most"]),
    (["train", "train.warmup_tokens=-1"], 2, ["train.warmup_tokens must be an integer in [0"]),
    (["train", "train.val_tokens=0"], 2, ["train.val_tokens must be a positive integer"]),
    (["train", "logger.name=foo"], 2, ["logger.name must be one of local, wandb"]),
    (["train", "logger=wandb", "logger.init_timeout=nan"], 2,
     ["logger.init_timeout must be a finite number"]),
    (["train", "results_dir="], 2, ["results_dir must not be empty"]),
    (["train", "results_dir=" + "r" * 300], 2, ["results_dir is too long"]),
    (["train", "experiment="], 2, ["experiment must be a plain directory name"]),
    (["train", "data.val_fraction=1.5"], 2, ["data.val_fraction must be a finite number in (0"]),
    (["train", "data.val_fraction=nan"], 2, ["data.val_fraction must be a finite number"]),
    (["train", "model.dropout=1.0"], 2, ["model.dropout must be a finite number in [0, 1)"]),
    (["train", "encoding=learned", "encoding.max_positions=0"], 2,
     ["encoding.max_positions must be a positive"]),
    (["train", "data=hf", "data.hf_name=x", "data.train_split="], 2,
     ["data.train_split must not be empty"]),
    # devices
    (["train", "device=gpu"], 2, ["device must be auto, cpu, cuda, cuda:N"]),
    (["train", "device=cuda:x"], 2, ["device must be auto, cpu, cuda, cuda:N"]),
    (["train", "device=cuda:64"], 2, device_words("cuda:64")),
    (["sweep", "device=cuda:64", "encoding=rope,alibi"], 2, device_words("cuda:64")),
    (["eval", RUN, "device=cuda:64"], 2, device_words("cuda:64")),
    # paths that are no corpus or tokenizer file
    (["train", "data=text", "data.path=/dev/zero"], 2,
     ["data.path '/dev/zero' is not a regular file or directory"]),
    (["train", "data=text", "data.path={d}/fifo"], 2, ["fifo' is not a regular file"]),
    (["train", "data=text", "data.path={d}/loop"], 2, ["loop' is a loop of symbolic links"]),
    (["train", "data=text", "data.path={d}/dangling"], 2, ["is a broken symbolic link"]),
    (["train", "data=text", "data.train_path={d}/fifo", "data.val_path={d}/corpus.txt"], 2,
     ["data.train_path", "is not a regular file or directory"]),
    (["train", "data=text", "data.path={d}/corpus.txt", "data.glob=/abs"], 2,
     ["data.glob must be a pattern relative to data.path"]),
    (["train", "data.tokenizer=file", "data.tokenizer_path=/dev/zero"], 2,
     ["data.tokenizer_path '/dev/zero' is not a regular file"]),
    (["train", "data.tokenizer=file", "data.tokenizer_path={d}"], 2, ["is a directory"]),
    (["train", "data=enwik8", "data.path={d}/fifo"], 2, ["is not a regular file"]),
    # posexp eval and resume
    (["eval"], 2, ["Missing argument 'RUN_DIR'", "posexp eval --help"]),
    (["eval", RUN, "--foo"], 2, ["posexp eval has no option '--foo'"]),
    (["finetune", RUN, "--foo"], 2, ["posexp finetune has no option '--foo'; it takes "
                                     "PARENT_RUN, overrides, and --cfg job"]),
    (["eval", RUN, "model.d_model=64"], 2, ["posexp eval can change only eval.*"]),
    (["eval", RUN, "eval.strde=3"], 2, ["eval has no key 'strde'; did you mean 'stride'?"]),
    (["eval", RUN, "eval.lengths=[16,16]"], 2, ["eval.lengths lists 16 more than once"]),
    (["eval", RUN, "eval.mode=sliding", "eval.stride=16"], 2,
     ["eval.stride (16) must be smaller than every window"]),
    (["eval", RUN, "eval.lengths=16,32"], 2, ["asks for several evaluations"]),
    (["eval", "{d}/runs/e/zeroed"], 1, ["checkpoint.pt: it is not a torch checkpoint"]),
    (["eval", "{d}/runs/e/nomodel"], 1, ["checkpoint.pt: it holds no model weights"]),
    (["eval", "{d}/runs/e/badyaml"], 1, ["badyaml/config.yaml is unreadable"]),
    (["eval", "{d}/runs/e/notmapping"], 1, ["notmapping/config.yaml is damaged"]),
    (["eval", "{d}/runs/e/wrongkeys"], 1,
     ["wrongkeys/config.yaml does not fit posexp's config", "seqlen"]),
    (["resume"], 2, ["Missing argument 'RUN_DIR'"]),
    (["resume", "{d}/notarun"], 2, ["is not a posexp run (no config.yaml)"]),
    (["resume", "{d}/runs/e/badyaml"], 1, ["config.yaml is unreadable"]),
    # report, reproduce, and the command line itself
    (["report", "{d}/nonexistent"], 2, ["nonexistent is not a directory"]),
    (["report", "{d}/runs", "--out", "{d}/corpus.txt"], 2,
     ["--out {d}/corpus.txt is a file", "a directory"]),
    (["report", "{d}/empty_dir"], 1, ["no posexp runs under"]),
    (["report", "--bogus"], 2, ["No such option: --bogus"]),
    (["report", "{d}/runs", "extra"], 2, ["unexpected extra argument"]),
    (["reprodue"], 2, ["No such command 'reprodue'", "reproduce"]),
    (["reproduce", "--preset", "{d}/broken.yaml"], 2, ["broken.yaml is not valid YAML at line"]),
    (["reproduce", "--preset", "{d}/nokey.yaml"], 2, ["nokey.yaml has no thresholds"]),
    (["reproduce", "--preset", "{d}/flatruns.yaml"], 2, ["run 1 must be a list of overrides"]),
    (["reproduce", "--preset", "{d}/target.yaml"], 2, ["is refused"]),
    (["reproduce", "--preset", "{d}/badreport.yaml"], 2,
     ["report must be a directory name beside its runs, got '../elsewhere'"]),
    (["reproduce", "--preset", "{d}/nomodel.yaml"], 2,
     ["thresholds.t5_flat must be a mapping of margin (a number, 0 or more) and reason"]),
    (["reproduce", "--preset", "{d}/norandom.yaml"], 2,
     ["norandom.yaml has no thresholds.randomized"]),
    (["reproduce", "--preset", "{d}/elsewhere.yaml"], 2,
     ["elsewhere.yaml: run 1: results_dir cannot be set in a preset"]),
    (["reproduce", "--preset", "{d}/flat15.yaml"], 2,
     ["thresholds.alibi_flat_at must be a list of integer multiples of L, each 2 or more"]),
    (["reproduce", "--preset", "nope"], 2,
     ["there is no reproduce preset 'nope'", ", ".join(sorted(
         p.stem for p in (Path(C.CONFIG_DIR) / "reproduce").glob("*.yaml")))]),
    (["reproduce", "--preset"], 2, ["requires an argument"]),
    (["--bogus"], 2, ["No such option: --bogus"]),
]
if not torch.backends.mps.is_available():
    BAD.append((["train", "device=mps"], 2, ["device=mps but torch has no MPS device here"]))
