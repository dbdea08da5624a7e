"""Where a pretrained model's files are, and what identifies them.

MODEL is a local directory (what ``save_pretrained`` writes: config.json, *.safetensors,
tokenizer.json) or a Hugging Face Hub id.  A hub id is looked up in the local Hugging Face
cache first, so a model downloaded once needs no network again (HF_HUB_OFFLINE=1 forbids
the network outright); only a model not in the cache is downloaded, and without network
that is one line naming the fix.  The revision recorded is the commit of the snapshot read.

What identifies the model is its files' SHA-256: every weight file, config.json and
tokenizer.json.  Weights are safetensors only (a pickle-free format).  In the hub cache a
weight file is a link to a blob named by its SHA-256, which is then read from the name
instead of hashing gigabytes again.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from posexp.errors import PosexpError, UsageError, first_line

CONFIG, TOKENIZER = "config.json", "tokenizer.json"
# what a download fetches: the config, the weights, the tokenizer (nothing else of the repo)
PATTERNS = ["config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json",
            "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
SHA256 = re.compile(r"[0-9a-f]{64}")
CHUNK = 1 << 22


@dataclass(frozen=True)
class Source:
    """A model's files: ``id`` is the hub id, or a local directory's name; ``revision`` the
    hub commit (None for a local directory)."""

    id: str
    path: Path
    revision: str | None

    @property
    def name(self) -> str:
        """What tables and figures call the model: the last part of its id."""
        return self.id.rsplit("/", 1)[-1]


def resolve(model: str, revision: str | None = None) -> Source:
    """The files of MODEL: a local directory, else a hub id (cached, or downloaded)."""
    path = Path(model).expanduser()
    if path.exists() or model.startswith(("/", ".", "~")) or not HUB_ID.fullmatch(model):
        if not path.is_dir():
            raise UsageError(f"{model} is neither a model directory (config.json, *.safetensors "
                             "and tokenizer.json, as save_pretrained writes them) nor a Hugging "
                             "Face Hub id (org/name)")
        if revision is not None:
            raise UsageError(f"--revision names a commit of a hub model; {model} is a local "
                             "directory")
        source = Source(path.resolve().name, path.resolve(), None)
    else:
        source = _from_hub(model, revision)
    missing = [n for n in (CONFIG, TOKENIZER) if not (source.path / n).is_file()]
    if missing:
        raise UsageError(f"{model} has no {' or '.join(missing)} ({source.path}); posexp reads "
                         "a model saved by save_pretrained with its fast tokenizer")
    weight_files(source.path)
    return source


def hub_cache() -> str:
    """The Hugging Face cache, as huggingface_hub finds it (read at each call, not import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return os.path.join(home, "hub")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _from_hub(model: str, revision: str | None) -> Source:
    """A hub model from the cache, else downloaded (unless HF_HUB_OFFLINE is set)."""
    from huggingface_hub import snapshot_download

    cache = hub_cache()
    try:
        path = Path(snapshot_download(model, revision=revision, cache_dir=cache,
                                      allow_patterns=PATTERNS, local_files_only=True))
        if (path / CONFIG).is_file() and list(path.glob("*.safetensors")):
            return Source(model, path, path.name)
    except Exception:  # not in the cache (huggingface_hub's errors differ between versions)
        pass
    fix = (f"download it once where there is network (hf download {model}), or give a local "
           f"directory: posexp pretrained /path/to/{model.rsplit('/', 1)[-1]}")
    if offline():
        raise PosexpError(f"{model} is not in the Hugging Face cache ({cache}) and "
                          f"HF_HUB_OFFLINE is set; {fix}")
    try:
        path = Path(snapshot_download(model, revision=revision, cache_dir=cache,
                                      allow_patterns=PATTERNS))
    except Exception as e:
        raise PosexpError(f"{model} is not in the Hugging Face cache ({cache}) and cannot be "
                          f"downloaded ({first_line(e)[:160]}); {fix}") from None
    return Source(model, path, path.name)


def weight_files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise UsageError(f"{path} holds no *.safetensors weights; posexp loads safetensors "
                         "only (a pickle-free format, which save_pretrained writes)")
    return files


def file_sha256(file: Path) -> str:
    """SHA-256 of a file's bytes; for a link into the hub cache's blobs named by their
    SHA-256 (how the hub stores weight files), the name."""
    target = file.resolve()
    if file.is_symlink() and target.parent.name == "blobs" and SHA256.fullmatch(target.name):
        return target.name
    digest = hashlib.sha256()
    with target.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(path: Path) -> str:
    """One SHA-256 of every weight file: each file's name and SHA-256, in name order."""
    digest = hashlib.sha256()
    for file in weight_files(path):
        digest.update(file.name.encode() + b"\0" + file_sha256(file).encode() + b"\n")
    return digest.hexdigest()


def fingerprints(source: Source) -> dict[str, str]:
    """The hashes that identify the model: its weights, its config and its tokenizer (the
    tokenizer's is posexp's tokenizer fingerprint: the SHA-256 of tokenizer.json's text)."""
    tokenizer = (source.path / TOKENIZER).read_text()
    return {"weights_sha256": weights_sha256(source.path),
            "config_sha256": file_sha256(source.path / CONFIG),
            "tokenizer_sha256": hashlib.sha256(tokenizer.encode()).hexdigest()}
