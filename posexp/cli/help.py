"""Help and what --cfg job prints: posexp train's help page lists the config groups a user
chooses from and the main keys with the values a command line would use; the main help
names the encodings posexp has, from its configs."""

from __future__ import annotations

import string
import textwrap
from pathlib import Path

import typer
from omegaconf import DictConfig, ListConfig, OmegaConf
from typer.core import TyperCommand

from posexp.cli.args import Args
from posexp.config import CONFIG_DIR, GROUPS, compose_overrides
from posexp.config.compose import group_options
from posexp.config.derive import resolve
from posexp.errors import UsageError, flat


def encodings_text() -> str:
    """The encodings posexp has, as their config files name them (no torch to import)."""
    return ", ".join(sorted(p.stem for p in (Path(CONFIG_DIR) / "encoding").glob("*.yaml")))


def print_config(cfg: DictConfig, package: str | None) -> None:
    """--cfg job: the config a run gets, every derived value filled in (config.derive.resolve)."""
    cfg = resolve(cfg)
    if package:
        node = OmegaConf.select(cfg, package, default=None)
        if node is None:
            raise UsageError(f"--package {package!r}: the config has no such key")
        cfg = OmegaConf.create({package.rsplit(".", 1)[-1]: node}) if not isinstance(
            node, DictConfig) else node
    typer.echo(OmegaConf.to_yaml(cfg, resolve=True).rstrip())


def print_hydra(cfg: DictConfig, hydra: DictConfig, whole: bool, package: str | None,
                resolve_all: bool) -> None:
    """--cfg hydra (Hydra's part of the composed config) or --cfg all (the run's config with
    it); --package KEY prints one part, --resolve its interpolations resolved."""
    shown = OmegaConf.create({**OmegaConf.to_container(resolve(cfg)),
                              **OmegaConf.to_container(hydra)})
    if resolve_all:  # against the whole config: Hydra's part names the run's keys
        try:
            OmegaConf.resolve(shown)
        except Exception as e:
            raise UsageError(f"--resolve: {flat(str(e)).split(' full_key:')[0]}") from None
    if not whole:
        shown = OmegaConf.create({"hydra": shown.hydra})
    if package:
        node = OmegaConf.select(shown, package, default=None)
        if node is None:
            raise UsageError(f"--package {package!r}: the config has no such key")
        typer.echo(f"# @package {package}")
        shown = node if isinstance(node, DictConfig) else OmegaConf.create(
            {package.rsplit(".", 1)[-1]: node})
    typer.echo(OmegaConf.to_yaml(shown).rstrip())


class Command(TyperCommand):
    """Plain click help: arguments named RUN_DIR, not {run_dir}; the docstring's paragraphs
    rewrapped as whole sentences; example blocks (\\b) kept as written."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        pieces = [p.replace("{", "").replace("}", "") for p in super().collect_usage_pieces(ctx)]
        return pieces + (["[KEY=VALUE ...]"] if ctx.allow_extra_args else [])


# The main keys of posexp train's help page, in order, and what each does.
MAIN_KEYS = [
    ("encoding.name", "the positional encoding (encoding=NAME chooses it)"),
    ("train.seq_len", "training window"),
    ("train.tokens", "training budget in tokens"),
    ("train.batch_tokens", "tokens a step, a multiple of seq_len (or train.batch_size)"),
    ("train.lr", "AdamW peak learning rate; warmup, then cosine decay"),
    ("model.d_model", "width (model.n_layer, model.n_head, model.d_ff: see --cfg job)"),
    ("eval.lengths", "evaluation windows (default 1-16 x train.seq_len)"),
    ("eval.mode", "nonoverlapping | sliding (eval.stride)"),
    ("eval.tokens", "the last validation tokens, scored at every length"),
    ("data.tokenizer", "byte | bpe (data.vocab_size) | file (data.tokenizer_path)"),
    ("seed", "weights and batch order"),
    ("device", "auto | cpu | cuda | cuda:N | mps"),
    ("attention", "score-bias kernel: auto | sdpa | flex | flash"),
    ("results_dir", "runs go to results_dir/experiment/run_name"),
    ("experiment", ""), ("run_name", ""),
]
HELP_GROUPS = (*GROUPS, "hydra/launcher")


def help_page(a: Args, command: str) -> str:
    """posexp train's -h page: Hydra's help template (hydra.help.template in
    configs/config.yaml), with $APP_CONFIG_GROUPS the groups a user chooses from and $CONFIG
    the main keys with the values this command line would use."""
    cfg = compose_overrides(a.overrides, a.config_dir, a.config_name, with_hydra=True,
                            command=command)
    choices = cfg.hydra.runtime.choices
    groups = []
    for group in HELP_GROUPS:
        chosen = choices.get(group)
        shown = ", ".join(f"[{o}]" if o == chosen else o
                          for o in group_options(group, a.config_dir))
        groups.append(textwrap.fill(shown, 100, initial_indent=f"  {group + '=':16}",
                                    subsequent_indent=" " * 18, break_on_hyphens=False))
    job = resolve(cfg, devices=False)
    keys = []
    for key, what in MAIN_KEYS:
        value = OmegaConf.select(cfg if key == "train.batch_tokens" else job, key)
        if isinstance(value, ListConfig):
            text = f"[{','.join(map(str, value))}]"
        else:
            text = "null" if value is None else str(getattr(value, "value", value))
        keys.append(f"  {key + '=' + text:32} {what}".rstrip())
    template = string.Template(cfg.hydra.help.template)
    return template.safe_substitute(APP_CONFIG_GROUPS="\n".join(groups),
                                    CONFIG="\n".join(keys), FLAGS_HELP="")
