"""posexp's Hydra config tree; installed as the package ``posexp.configs``."""
