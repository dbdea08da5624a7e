"""Pretrained models on posexp's protocol: a run directory for a Hugging Face causal LM
(a hub id at a revision, or a local directory), scored on the same spans as posexp's own
runs -- perplexity against length in its own tokenizer, per token and per byte -- with RoPE
scaling through transformers' own rope settings, and passkey retrieval in its tokenizer.
It never trains.

source.py finds and hashes the model's files (offline first); model.py loads it and gives
posexp/evaluate/windows.py the model interface it calls; rope.py rescales its rotary positions;
passkey.py builds and scores passkey instances; config.py is the run's config; scoring.py
scores what eval.json lacks; lifecycle.py is the run (lock, identity, create, continue).
transformers (the ``hf`` extra) is imported only when a pretrained model is loaded.
"""
