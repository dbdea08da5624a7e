"""posexp pretrained: a run directory for a Hugging Face causal LM, scored on posexp's
protocol (posexp/pretrained).  A pretrained run is then a run like any other for ls,
compare and report; ``posexp eval RUN`` and ``posexp resume RUN`` of one score it through
posexp.pretrained, and ``posexp finetune`` refuses it: those commands (run_commands.py) read
the run's kind (runs/kind.py) and hand a pretrained run to the functions here."""

from __future__ import annotations

from pathlib import Path

import typer

from posexp.cli.app import EXTRA, app
from posexp.cli.args import saved_run_args
from posexp.cli.errors import fail
from posexp.cli.help import Command, print_config
from posexp.errors import UsageError

TAKES = ("MODEL, --revision REV, --preset NAME, overrides of data, eval.*, task, device, "
         "attention and where")


@app.command(cls=Command, context_settings=EXTRA,
             short_help="Score a pretrained Hugging Face model on the same protocol.")
def pretrained(
    ctx: typer.Context,
    model: str | None = typer.Argument(None, metavar="MODEL", show_default=False,
                                       help="A Hugging Face Hub id (org/name) or a local "
                                            "directory that save_pretrained wrote."),
    revision: str | None = typer.Option(None, "--revision", metavar="REV", show_default=False,
                                        help="The hub commit, branch or tag (default main)."),
    preset: str | None = typer.Option(None, "--preset", metavar="NAME", show_default=False,
                                      help="configs/pretrained/NAME.yaml (or a YAML file): "
                                           "MODEL, revision and overrides; MODEL and the "
                                           "overrides given here come after its own."),
) -> None:
    """Score a pretrained causal LM: perplexity against length, RoPE scaling, passkey and RULER.

    Makes a run directory for MODEL (results/default/<name>: results_dir, experiment and
    run_name as for any run) whose identity is the model's id, revision and the SHA-256 of
    its weights, config and tokenizer, and the corpus. It never trains. The run is scored
    on the validation spans of data= (posexp's corpora, in the model's own tokenizer), per
    token and per byte, at eval.lengths (default 1/4 to 4 x the length the model was trained
    at), with eval.rope_scaling=plain,linear,ntk,dynamic,yarn,llama3,longrope and
    eval.rope_scaling.factor=S through transformers' rope settings, and with task=passkey (or
    RULER's niah_multikey, niah_multivalue, variable_tracking, common_words) at task.lengths
    and task.depths. eval.mode=lm_eval gives lm-evaluation-harness's number. A hub id is
    read from the Hugging Face cache (no network; HF_HUB_OFFLINE=1 forbids it) or downloaded
    once. Running it again scores only what
    eval.json lacks; posexp eval RUN then scores more, posexp ls, compare and report read it
    as any run. fp32 on the CPU, bf16 on CUDA; --cfg job prints the config. --preset
    tinyllama-gpu is the GPU preset (scripts/gpu.sh pretrained).

    \b
    Examples:
      posexp pretrained meta-llama/Llama-3.2-1B data=text data.path=~/pg19/test
      posexp pretrained ./my-model eval.lengths=[512,1024,2048] eval.tokens=8192
      posexp eval results/default/Llama-3.2-1B eval.lengths=[2048,4096,8192,16384]
                  eval.rope_scaling=plain,linear,ntk,yarn eval.rope_scaling.factor=4
      posexp eval results/default/Llama-3.2-1B task=passkey task.lengths=[4096,8192,16384]
                  task.depths=[0,0.25,0.5,0.75,1]
    """
    try:
        from posexp.pretrained.lifecycle import build
        from posexp.pretrained.lifecycle import pretrained as score_pretrained

        overrides, show = saved_run_args(ctx.args, "pretrained", TAKES)
        if preset is not None:
            from posexp.pretrained.config import preset as read_preset

            named, named_revision, named_overrides = read_preset(preset)
            model, revision = model or named, revision or named_revision
            overrides = [*named_overrides, *overrides]
        if model is None:
            raise UsageError("Missing argument 'MODEL'; see posexp pretrained --help")
        if show:
            print_config(build(model, revision, overrides)[0], None)
            return
        score_pretrained(model, revision, overrides)
    except BaseException as e:
        fail(e)


def eval_pretrained(ctx: typer.Context, run_dir: Path) -> None:
    from posexp.pretrained import config as pcfg
    from posexp.pretrained.lifecycle import evaluate_dir
    from posexp.runs import Run

    overrides, show = saved_run_args(ctx.args, "eval", "RUN_DIR, overrides of eval.*, task, "
                                     "device and attention")
    if show:
        cfg = pcfg.structured(Run(run_dir).config())
        pcfg.apply(cfg, pcfg.split(overrides, pcfg.EVAL_KEYS, "eval")[1])
        pcfg.defaults(cfg)
        print_config(cfg, None)
        return
    evaluate_dir(run_dir, overrides)


def resume_pretrained(run_dir: Path) -> None:
    from posexp.pretrained.lifecycle import evaluate_dir

    evaluate_dir(run_dir, [], command="resume")


def finetune_pretrained(ctx: typer.Context, parent_dir: Path) -> None:
    raise UsageError(f"{parent_dir} is a pretrained model's run: posexp scores pretrained "
                     "models and never trains them (fine-tuning them is out of scope); "
                     "posexp finetune continues a run posexp trained")
